"""A workload that asks for cpu, memory, ephemeral storage, shared memory, a PersistentVolumeClaim
and a Secret as env runs on the local cluster (issue 15): Kueue admits it (its queue covers
ephemeral storage too), the namespace's LimitRange lets it through, the scheduler binds it to a
tainted GPU node, and the live pod has all of it."""

import uuid

import pytest
from kubernetes.client.rest import ApiException

from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.submit.spec import workload_spec
from tenants.services.grants import grant_quota
from tests.scheduler.cluster_helpers import h100_h200_team, wait_for, wait_for_quota

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture
def team(kube, tenant_namespaces, world):
    tenant, _mig, h200 = h100_h200_team(world, kube, tenant_namespaces, "pod", "Pod spec")
    grant_quota(actor=world.admin, tenant=tenant, resource_class=h200, amount=1)
    reconcile_tenant(kube, tenant.pk)
    ns = tenant_namespaces[-1]
    wait_for_quota(kube, ns)
    return tenant, h200, ns


@pytest.fixture
def dataset(kube_cluster, team):
    """A claim bound by hand to a volume, as a platform's storage would have it bound: the local
    cluster runs no persistent-volume controller, and the scheduler refuses a pod whose claim
    is not bound. The team's Secret for envFrom too. Both are the test's set-up as the cluster's
    admin, not the portal's (it never creates them)."""
    _, _, ns = team
    core = kube_cluster.core
    volume, claim = f"data-{uuid.uuid4().hex[:8]}", "datasets"
    core.create_persistent_volume(
        {
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "manual",
                "hostPath": {"path": "/srv/datasets"},
                "claimRef": {"namespace": ns, "name": claim},
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        ns,
        {
            "metadata": {"name": claim},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "manual",
                "resources": {"requests": {"storage": "10Gi"}},
            },
        },
    )
    # the volume was made for this claim (claimRef): the volume binder binds the two
    wait_for(
        f"{claim} bound",
        lambda: core.read_namespaced_persistent_volume_claim(claim, ns).status.phase == "Bound",
    )
    core.create_namespaced_secret(
        ns, {"metadata": {"name": "wandb"}, "stringData": {"WANDB_PROJECT": "pod-spec"}}
    )
    yield claim
    # No protection controller runs here to lift these finalizers: lifted by hand, or the
    # claim (and the namespace with it) would stay Terminating.
    unprotected = {"metadata": {"finalizers": None}}
    for patch, delete in (
        (
            lambda: core.patch_namespaced_persistent_volume_claim(claim, ns, unprotected),
            lambda: core.delete_namespaced_persistent_volume_claim(claim, ns),
        ),
        (
            lambda: core.patch_persistent_volume(volume, unprotected),
            lambda: core.delete_persistent_volume(volume),
        ),
    ):
        try:
            patch()
            delete()
        except ApiException as exc:
            if exc.status != 404:
                raise


def test_a_sized_job_with_shm_a_claim_and_a_secret_runs(kube, team, dataset, world, settings):
    tenant, h200, ns = team
    w = workloads.submit_workload(
        actor=world.admin,
        tenant=tenant,
        spec=workload_spec(
            name="train-sized",
            kind="job",
            image="registry.k8s.io/pause:3.10",
            resources={h200.slug: 1},
            priority="gpu-low",
            cpu="4",
            memory="16Gi",
            ephemeral_storage="10Gi",
            shm="2Gi",
            volumes=[{"claim": dataset, "mount_path": "/data", "read_only": True}],
            env_from_secrets=["wandb"],
        ),
    )
    workload_sync.create_in_cluster(kube, w.pk)

    def running():
        current = workload_sync.sync_workload(kube, w.pk)
        return current if current.state == "running" else None

    wait_for("the sized job running", running, timeout=90)
    (pod,) = kube.list("Pod", ns, label_selector=f"gpu-portal.io/workload={w.pk}")
    spec = pod["spec"]
    # an H200 node (with `localcluster up --large N` any of several)
    node = kube.get("Node", spec["nodeName"])
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert GPU_TOLERATION in spec["tolerations"]
    (container,) = spec["containers"]
    sized = {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "10Gi", "nvidia.com/gpu": "1"}
    assert container["resources"] == {"requests": sized, "limits": sized}
    assert container["envFrom"] == [{"secretRef": {"name": "wandb"}}]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["shm"]["mountPath"] == "/dev/shm"  # noqa: S108 - the pod's, checked
    assert mounts["data-0"] == {"name": "data-0", "mountPath": "/data", "readOnly": True}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    assert volumes["data-0"]["persistentVolumeClaim"] == {"claimName": dataset, "readOnly": True}

    # the namespace caps containers where the portal's checks do
    limits = kube.get("LimitRange", "gpu-portal-defaults", ns)["spec"]["limits"][0]
    assert limits["max"] == {
        "cpu": settings.WORKLOAD_MAX_CPU,
        "memory": settings.WORKLOAD_MAX_MEMORY,
        "ephemeral-storage": settings.WORKLOAD_MAX_EPHEMERAL_STORAGE,
    }

    workloads.cancel_workload(actor=world.admin, workload=w)
    workload_sync.delete_from_cluster(kube, w.pk)
