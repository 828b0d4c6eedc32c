"""Work on the local cluster's real node (localcluster/realnode.py), where processes run: a
portal job's command runs, its log is read through the portal and it finishes; a team's
inference service answers through its Service and cluster DNS; and a member's kubectl pod cannot
reach another team's service, because the NetworkPolicies the portal renders say so (a pod of
the service's own team reaches it, so the refusal is the policy's, not a broken network).

The real node plays B200 GPUs for these tests only (no seed node is a B200), so the portal's
B200 pods can land nowhere else."""

import json
import os
from decimal import Decimal

import pytest

from localcluster import images, node_addons, realnode
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.runs import reconcile_cluster_objects, reconcile_tenant
from scheduler.cluster.reconcile.specs import tenant_namespace
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.lifecycle.logs import workload_logs
from scheduler.workloads.models import Workload
from scheduler.workloads.submit.spec import workload_spec
from tenants.services.grants import grant_quota
from tenants.services.tenants import add_member, create_tenant, update_tenant
from tests.realnode.probes import fetch_from_pod
from tests.scheduler.cluster_helpers import (
    as_user,
    restricted_pod,
    unique_slug,
    wait_for,
    wait_for_quota,
)
from tests.tenants.factories import PoolFactory, ResourceClassFactory
from workspaces.models import Workspace

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

REAL_NODE_TOLERATION = {
    "key": realnode.REAL_NODE_LABEL,
    "operator": "Exists",
    "effect": "NoSchedule",
}
DEMO = images.demo_python_ref()
GPUS = 4


@pytest.fixture
def b200(kube, kube_cluster, settings):
    """The real node as a node of 4 whole B200s for this test, tolerated by the portal's pods;
    a pool of those 4."""
    settings.GPU_NODE_TOLERATIONS = [*settings.GPU_NODE_TOLERATIONS, REAL_NODE_TOLERATION]
    node_addons.advertise_gpus(kube_cluster.api_client, "B200-180GB", GPUS, "all-disabled")
    rc = ResourceClassFactory(
        slug="b200-180gb",
        gpu_model="B200-180GB",
        kind="whole",
        profile="",
        resource_name="nvidia.com/gpu",
        gpu_fraction=1,
        memory_gb=180,
    )
    PoolFactory(resource_class=rc, capacity=GPUS)
    reconcile_cluster_objects(kube)
    yield rc
    node_addons.withdraw_gpus(kube_cluster.api_client)


def team(world, kube, tenant_namespaces, rc, units, prefix):
    tenant = create_tenant(
        actor=world.admin,
        slug=unique_slug(prefix),
        name=prefix,
        allowed_priority_classes=["gpu-low"],
    )
    update_tenant(actor=world.admin, tenant=tenant, gpu_ceiling=Decimal(64))
    tenant_namespaces.append(tenant_namespace(tenant))
    add_member(actor=world.admin, tenant=tenant, username=world.member.username, role="member")
    grant_quota(actor=world.admin, tenant=tenant, resource_class=rc, amount=units)
    reconcile_tenant(kube, tenant.pk)
    wait_for_quota(kube, tenant.namespace)
    tenant.refresh_from_db()
    return tenant


def submit(kube, world, tenant, rc, **spec):
    w = workloads.submit_workload(
        actor=world.admin,
        tenant=tenant,
        spec=workload_spec(image=DEMO, resources={rc.slug: 1}, priority="gpu-low", **spec),
    )
    workload_sync.create_in_cluster(kube, w.pk)
    return w


def settled(kube, workload, states, timeout=120):
    def check():
        w = workload_sync.sync_workload(kube, workload.pk)
        return w if w.state in states else None

    return wait_for(f"{workload.name} in {states}", check, timeout=timeout)


def pods_of(kube, namespace):
    return kube.list("Pod", namespace)


def test_a_portal_job_runs_on_the_real_node_logs_and_finishes(
    kube, kube_cluster, tenant_namespaces, world, b200
):
    tenant = team(world, kube, tenant_namespaces, b200, 1, "rn")
    job = submit(
        kube,
        world,
        tenant,
        b200,
        name="train",
        kind="job",
        command=["python", "/opt/demo/train.py"],
        env={"EPOCHS": "3", "EPOCH_SECONDS": "0.5"},
    )
    running = settled(kube, job, {"running", "succeeded"})
    (pod,) = pods_of(kube, tenant.namespace)
    assert pod["spec"]["nodeName"] == realnode.NODE_NAME
    done = settled(kube, job, {"succeeded", "failed"})
    assert done.state == "succeeded", (done.reason, done.message)
    assert done.finished_at is not None and done.finished_at >= running.started_at
    name, log = workload_logs(kube, actor=world.member, workload=done)
    assert name == pod["metadata"]["name"]
    assert "epoch 3/3 loss" in log and log.rstrip().endswith("done")


def probe_job(name, url, resource):
    """A member's kubectl Job on the real node that fetches `url` once and prints the answer."""
    pod = restricted_pod("probe", {resource: 1})
    container = pod["spec"]["containers"][0]
    container["image"] = DEMO
    container["imagePullPolicy"] = "Never"
    container["command"] = [
        "python",
        "-c",
        "import sys, urllib.request\n"
        "try:\n"
        f"    print('answer', urllib.request.urlopen({url!r}, timeout=4).read().decode())\n"
        "except OSError as exc:\n"
        "    print('refused', exc); sys.exit(3)\n",
    ]
    pod["spec"]["tolerations"].append(REAL_NODE_TOLERATION)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": pod["spec"]}},
    }


def job_log(kube, namespace, job):
    def finished():
        pods = [
            p
            for p in pods_of(kube, namespace)
            if p["metadata"].get("labels", {}).get("job-name") == job
            and p["status"].get("phase") in ("Succeeded", "Failed")
        ]
        return pods[0] if pods else None

    pod = wait_for(f"{job} finished", finished, timeout=90)
    return pod["status"]["phase"], kube.pod_log(pod["metadata"]["name"], namespace)


def test_a_service_answers_its_own_team_and_another_teams_member_cannot_reach_it(
    kube, kube_cluster, tenant_namespaces, world, b200
):
    owner = team(world, kube, tenant_namespaces, b200, 2, "rs")
    other = team(world, kube, tenant_namespaces, b200, 1, "ro")
    service = submit(
        kube,
        world,
        owner,
        b200,
        name="ranker",
        kind="deployment",
        replicas=1,
        command=["python", "/opt/demo/serve.py"],
        ports=[8080],
    )
    settled(kube, service, {"running"})
    admin = KubeGateway.from_kubeconfig(str(kube_cluster.kubeconfig))
    (svc,) = admin.list("Service", owner.namespace)
    url = f"http://{svc['metadata']['name']}.{owner.namespace}.svc.cluster.local:8080/healthz"
    wait_for(
        "the service's pod Ready",
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for p in pods_of(kube, owner.namespace)
            for c in p["status"].get("conditions") or []
        ),
        timeout=60,
    )
    member = as_user(kube_cluster, world.member.username)

    mine = probe_job("probe-own", url, b200.resource_name)
    mine["metadata"]["namespace"] = owner.namespace
    member.create(mine)
    phase, log = job_log(kube, owner.namespace, "probe-own")
    assert (phase, log.split()[:2]) == ("Succeeded", ["answer", "ok"]), log

    theirs = probe_job("probe-other", url, b200.resource_name)
    theirs["metadata"]["namespace"] = other.namespace
    member.create(theirs)
    phase, log = job_log(kube, other.namespace, "probe-other")
    assert phase == "Failed" and log.startswith("refused"), log
    policies = {p["metadata"]["name"] for p in kube.list("NetworkPolicy", owner.namespace)}
    assert policies, "the portal rendered no NetworkPolicy for the service's team"


def test_a_notebook_server_starts_writes_its_home_and_answers_only_with_its_secret(
    kube, kube_cluster, tenant_namespaces, world, b200, settings
):
    """The workspace the portal renders, on the real node: Jupyter starts under the restricted
    profile as uid 1000, writes its home volume, and answers /api/status through its Service
    with the server's own secret, and refuses the same request without it (a server reached
    around the gateway)."""
    from workspaces import server_secret, services
    from workspaces import sync as workspace_sync
    from workspaces.activity import parse_activity
    from workspaces.manifests import status_url

    settings.WORKSPACE_STORAGE_CLASS = "real-node-homes"
    tenant = team(world, kube, tenant_namespaces, b200, 1, "rw")
    ws = services.open_workspace(
        actor=world.member,
        tenant=tenant,
        name="nb",
        kind="jupyter",
        image=DEMO,
        resource_class=b200.slug,
        time_limit_h="1",
    )
    workspace_sync.apply_objects(kube, ws.pk)
    home = realnode.NODE_DIR / "volumes" / f"home-{tenant.namespace}"
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, 1000, 1000)
    volume = f"home-{tenant.namespace}"
    kube_cluster.core.create_persistent_volume(
        {
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "real-node-homes",
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": str(home), "type": "Directory"},
                "claimRef": {"namespace": tenant.namespace, "name": f"ws-{ws.name}-home"},
            },
        }
    )
    try:
        ws.refresh_from_db()
        run = Workload.objects.get(pk=ws.run_id)
        workload_sync.create_in_cluster(kube, run.pk)
        settled(kube, run, {"running"}, timeout=120)
        (pod,) = pods_of(kube, tenant.namespace)
        assert pod["spec"]["nodeName"] == realnode.NODE_NAME
        url = status_url("jupyter", tenant.namespace, ws.name)
        secret = server_secret.unseal(Workspace.objects.get(pk=ws.pk).server_secret_sealed)
        headers = server_secret.upstream_credentials("jupyter", secret)["headers"]
        # asked from the platform's namespace, as the portal's activity reader asks in a cluster
        # (the team's NetworkPolicy lets that namespace in), with and without the secret
        platform = settings.PLATFORM_NAMESPACE
        with_secret = fetch_from_pod(kube_cluster.core, platform, url, headers)
        code, body = with_secret.split(" ", 1)
        assert code == "200" and parse_activity("jupyter", json.loads(body)), with_secret
        without = fetch_from_pod(kube_cluster.core, platform, url, {})
        assert without.split(" ", 1)[0] in ("401", "403"), without
        # its home is the volume, written by the server (as uid 1000)
        assert any(home.iterdir()), "the server wrote nothing in its home"
    finally:
        kube_cluster.core.delete_persistent_volume(volume)
