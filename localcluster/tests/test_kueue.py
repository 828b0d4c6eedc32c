"""Kueue on the local cluster: CRDs served, webhooks scoped to tenant namespaces, and a quota of
one MIG slice on the H100 flavor that admits one unlabelled Job, holds a Job pinned to the A100
and gates a bare Pod. Plain pytest; fixtures from localcluster.pytest_plugin."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from catalog import slices
from localcluster import fleet, kueue
from localcluster.pytest_plugin import wait_for

pytestmark = pytest.mark.cluster

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
MIG = "nvidia.com/mig-3g.40gb"
SLICES = slices.SLICE_RESOURCE
PRODUCT = "nvidia.com/gpu.product"
H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
ADMISSION_GATE = "kueue.x-k8s.io/admission"


@dataclass
class KueueEnv:
    namespace: str
    cluster_queue: str
    gpu_flavor: str
    cpu_flavor: str
    core: client.CoreV1Api
    batch: client.BatchV1Api
    custom: client.CustomObjectsApi


# --- helpers ---------------------------------------------------------------------------------


def container(resources: dict[str, str]) -> dict:
    return {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": dict(resources), "limits": dict(resources)},
    }


def gpu_resources() -> dict[str, str]:
    return {MIG: "1", "cpu": "100m", "memory": "64Mi"}


def job_manifest(name: str, node_selector: dict[str, str] | None = None) -> dict:
    """A Job as a member would write it with kubectl: no queue label, not suspended."""
    spec: dict = {
        "containers": [container(gpu_resources())],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": spec}},
    }


def workload_for(env: KueueEnv, uid: str) -> dict | None:
    """The Workload Kueue made for a Job or Pod: labelled with the owner's uid."""
    items = env.custom.list_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "workloads", label_selector=f"{JOB_UID_LABEL}={uid}"
    )["items"]
    return items[0] if items else None


def condition(obj: dict | None, kind: str) -> dict | None:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def is_true(obj: dict | None, kind: str) -> bool:
    c = condition(obj, kind)
    return bool(c and c["status"] == "True")


def job_pods(env: KueueEnv, job: str) -> list[client.V1Pod]:
    return env.core.list_namespaced_pod(env.namespace, label_selector=f"job-name={job}").items


def wait_gone(what: str, read) -> None:
    def gone() -> bool:
        try:
            read()
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    wait_for(f"{what} deleted", gone, timeout=60)


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kueue_env(kube_cluster) -> Iterator[KueueEnv]:
    suffix = uuid.uuid4().hex[:6]
    env = KueueEnv(
        namespace=f"t-kueue-{suffix}",
        cluster_queue=f"t-kueue-{suffix}",
        gpu_flavor=f"t-kueue-h100-{suffix}",
        cpu_flavor=f"t-kueue-default-{suffix}",
        core=kube_cluster.core,
        batch=client.BatchV1Api(kube_cluster.api_client),
        custom=client.CustomObjectsApi(kube_cluster.api_client),
    )
    labels = {"gpu-portal.local/test": "true", kueue.QUEUE_ENFORCED_LABEL: "true"}
    env.core.create_namespace({"metadata": {"name": env.namespace, "labels": labels}})

    def create(plural: str, body: dict) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", **body}
        if body["kind"] == "LocalQueue":
            env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, plural, body)
        else:
            env.custom.create_cluster_custom_object(GROUP, VERSION, plural, body)

    try:
        create(
            "resourceflavors",
            {
                "kind": "ResourceFlavor",
                "metadata": {"name": env.gpu_flavor},
                # Kueue puts the flavor's tolerations on the pods it admits: the GPU nodes'
                # taint is no obstacle to a member's plain Job
                "spec": {"nodeLabels": {PRODUCT: H100}, "tolerations": fleet.gpu_tolerations()},
            },
        )
        create(
            "resourceflavors",
            {"kind": "ResourceFlavor", "metadata": {"name": env.cpu_flavor}, "spec": {}},
        )
        create(
            "clusterqueues",
            {
                "kind": "ClusterQueue",
                "metadata": {"name": env.cluster_queue},
                "spec": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": env.namespace}
                    },
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory"],
                            "flavors": [
                                {
                                    "name": env.cpu_flavor,
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "4"},
                                        {"name": "memory", "nominalQuota": "8Gi"},
                                    ],
                                }
                            ],
                        },
                        {
                            # Kueue counts GPU resources in the portal's slices (its
                            # Configuration's transformations): one 3g.40gb is 3
                            "coveredResources": [SLICES],
                            "flavors": [
                                {
                                    "name": env.gpu_flavor,
                                    "resources": [{"name": SLICES, "nominalQuota": 3}],
                                }
                            ],
                        },
                    ],
                },
            },
        )
        create(
            "localqueues",
            {
                "kind": "LocalQueue",
                "metadata": {"name": "default", "namespace": env.namespace},
                "spec": {"clusterQueue": env.cluster_queue},
            },
        )
        # Until Kueue has seen the queues, a Workload would be Inadmissible for a moment.
        wait_for(
            "ClusterQueue Active",
            lambda: is_true(
                env.custom.get_cluster_custom_object(
                    GROUP, VERSION, "clusterqueues", env.cluster_queue
                ),
                "Active",
            ),
        )
        wait_for(
            "ServiceAccount default",
            lambda: (
                env.core.list_namespaced_service_account(
                    env.namespace, field_selector="metadata.name=default"
                ).items
            ),
        )
        yield env
    finally:
        # Workloads first, so the queue and flavors can go (Kueue holds them with finalizers
        # while in use): deleting the Jobs and Pods ourselves takes 0.1 s, the namespace
        # controller alone backs off for seconds on Kueue's finalizers. The namespace itself
        # is not waited for (as with the kube_namespace fixture).
        env.batch.delete_collection_namespaced_job(
            env.namespace, propagation_policy="Background", grace_period_seconds=0
        )
        env.core.delete_collection_namespaced_pod(env.namespace, grace_period_seconds=0)
        wait_for(
            "Workloads deleted",
            lambda: (
                not env.custom.list_namespaced_custom_object(
                    GROUP, VERSION, env.namespace, "workloads"
                )["items"]
            ),
        )
        env.core.delete_namespace(env.namespace)
        for plural, name in (
            ("clusterqueues", env.cluster_queue),
            ("resourceflavors", env.gpu_flavor),
            ("resourceflavors", env.cpu_flavor),
        ):
            try:
                env.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
            wait_gone(
                f"{plural}/{name}",
                lambda p=plural, n=name: env.custom.get_cluster_custom_object(GROUP, VERSION, p, n),
            )


@pytest.fixture(scope="module")
def admitted_job(kueue_env: KueueEnv) -> client.V1Job:
    """A Job without queue label that Kueue suspends, admits on the H100 flavor and lets run;
    it holds the queue's only MIG slice for the rest of the module."""
    env = kueue_env
    job = env.batch.create_namespaced_job(env.namespace, job_manifest("fits-h100"))
    # The mutating webhook answered the create: suspended and queued in `default`.
    assert job.spec.suspend is True
    assert job.metadata.labels.get(QUEUE_LABEL) == "default"
    wait_for(
        "Workload Admitted",
        lambda: is_true(workload_for(env, job.metadata.uid), "Admitted"),
        timeout=60,
    )
    wait_for(
        "job pod Running",
        lambda: any(p.status.phase == "Running" for p in job_pods(env, "fits-h100")),
        timeout=60,
    )
    return env.batch.read_namespaced_job("fits-h100", env.namespace)


# --- tests -----------------------------------------------------------------------------------


def test_kueue_crds_are_served(kube_cluster):
    served = kueue.served_resources(kube_cluster.api_client)
    want = {"clusterqueues", "localqueues", "resourceflavors", "workloads", "cohorts"}
    want |= {"admissionchecks", "workloadpriorityclasses", "topologies"}
    assert want <= served, sorted(want - served)


def test_workload_webhooks_only_select_tenant_namespaces(kube_cluster):
    adm = client.AdmissionregistrationV1Api(kube_cluster.api_client)
    hooks = [
        *adm.read_mutating_webhook_configuration(kueue.MUTATING).webhooks,
        *adm.read_validating_webhook_configuration(kueue.VALIDATING).webhooks,
    ]
    by_name = {h.name: h for h in hooks}
    workload_kinds = ("job", "pod", "deployment", "statefulset", "jobset")
    for name in (f"{prefix}{kind}" for kind in workload_kinds for prefix in "mv"):
        hook = by_name[f"{name}.kb.io"]
        assert hook.namespace_selector.match_labels == {kueue.QUEUE_ENFORCED_LABEL: "true"}
        assert hook.failure_policy == "Fail"
        assert hook.client_config.url.startswith("https://127.0.0.1:")
    # Kueue's own kinds keep their rules; integrations no controller runs for here are not
    # installed (JobSet's is: localcluster/jobset.py)
    assert {"mclusterqueue.kb.io", "vworkload.kb.io", "vcohort.kb.io"} <= set(by_name)
    assert not {"vraycluster.kb.io", "mleaderworkerset.kb.io"} & set(by_name)


def test_unlabelled_job_is_suspended_admitted_and_runs_on_h100(
    kube_cluster, kueue_env, admitted_job
):
    env = kueue_env
    assert admitted_job.spec.suspend is False  # Kueue unsuspended it on admission
    wl = workload_for(env, admitted_job.metadata.uid)
    assert wl is not None
    assert wl["metadata"]["ownerReferences"][0]["name"] == "fits-h100"
    assert wl["spec"]["queueName"] == "default"
    admission = wl["status"]["admission"]
    assert admission["clusterQueue"] == env.cluster_queue
    (podset,) = admission["podSetAssignments"]
    flavors = {SLICES: env.gpu_flavor, "cpu": env.cpu_flavor, "memory": env.cpu_flavor}
    assert podset["flavors"] == flavors
    (pod,) = [p for p in job_pods(env, "fits-h100") if p.status.phase == "Running"]
    assert pod.spec.node_selector == {PRODUCT: H100}  # the flavor's nodeLabels
    tolerations = env.core.api_client.sanitize_for_serialization(pod.spec.tolerations)
    for toleration in fleet.gpu_tolerations():  # and its tolerations (the job had none)
        assert toleration in tolerations, tolerations
    node = env.core.read_node(pod.spec.node_name)
    assert node.metadata.labels[PRODUCT] == H100
    if not env.core.list_node(label_selector="gpu-portal.local/bench=true").items:
        assert pod.spec.node_name == "gpu-h100-0"

    # The ClusterQueue accounts for it (its status follows a moment later); v1beta1 reads go
    # through Kueue's /convert webhook.
    def gpu_usage() -> dict[str, str]:
        cq = env.custom.get_cluster_custom_object(
            GROUP, "v1beta1", "clusterqueues", env.cluster_queue
        )
        assert cq["apiVersion"] == f"{GROUP}/v1beta1"
        return {
            r["name"]: r["total"]
            for f in (cq.get("status") or {}).get("flavorsUsage") or []
            if f["name"] == env.gpu_flavor
            for r in f["resources"]
        }

    wait_for("ClusterQueue usage", lambda: gpu_usage() == {SLICES: "3"})


def test_job_pinned_to_a100_stays_suspended(kube_cluster, kueue_env, admitted_job):
    env = kueue_env
    job = env.batch.create_namespaced_job(
        env.namespace, job_manifest("wants-a100", node_selector={PRODUCT: A100})
    )
    assert job.spec.suspend is True

    def pending_message() -> str | None:
        c = condition(workload_for(env, job.metadata.uid), "QuotaReserved")
        # Kueue v0.19's own reason (UnadmittedWorkloadsObservability; `Pending` without it)
        said = c and c["status"] == "False" and c["reason"] == "NoMatchingFlavor"
        return c["message"] if said else None

    message = wait_for("Workload NoMatchingFlavor", pending_message, timeout=60)
    assert "doesn't match node affinity" in message, message
    job = env.batch.read_namespaced_job("wants-a100", env.namespace)
    assert job.spec.suspend is True
    assert job_pods(env, "wants-a100") == []


def test_bare_gpu_pod_is_gated_while_quota_is_used(kube_cluster, kueue_env, admitted_job):
    env = kueue_env
    pod = env.core.create_namespaced_pod(
        env.namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "bare-mig"},
            "spec": {
                "containers": [container(gpu_resources())],
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
            },
        },
    )
    assert ADMISSION_GATE in [g.name for g in pod.spec.scheduling_gates or []]
    assert pod.metadata.labels.get(QUEUE_LABEL) == "default"

    def pending_message() -> str | None:
        c = condition(workload_for(env, pod.metadata.uid), "QuotaReserved")
        said = c and c["status"] == "False" and c["reason"] == "WaitingForQuota"
        return c["message"] if said else None

    message = wait_for("pod Workload WaitingForQuota", pending_message, timeout=60)
    assert f"insufficient unused quota for {SLICES}" in message, message
    pod = env.core.read_namespaced_pod("bare-mig", env.namespace)
    assert ADMISSION_GATE in [g.name for g in pod.spec.scheduling_gates or []]
    assert pod.spec.node_name is None
    assert pod.status.phase == "Pending"
