"""MultiKueue on two local clusters: the main one is the fleet's manager, a second one
(localcluster/worker.py, fixture `kube_worker`) its worker. Every object is the portal's render
(render/multikueue.py for the manager's MultiKueue objects and the worker's kubeconfig Secret,
render/namespace.py and render/kueue.py for the team's namespace, flavor and queues on both),
applied through the portal's door (scheduler/cluster/kube.py) as the clusters' admin.

A Job in a team namespace whose ClusterQueue carries the MultiKueue check is admitted on the
manager and runs on the worker: its pods exist there and not on the manager, and its status
comes back; deleting it on the manager removes it from the worker. A team whose queue has no
check runs its Job on the manager itself.

Needs the manager's Kueue with MultiKueue on (localcluster/kueue.py: the full local cluster's
role) and the worker's (python -m localcluster worker up, or the fixture).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import pytest

from catalog import slices
from catalog.facts import product_label
from localcluster import worker
from localcluster.fleet import gpu_tolerations
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.render.kueue import render_flavors, render_queues
from scheduler.cluster.render.labels import LOCAL_QUEUE
from scheduler.cluster.render.multikueue import (
    DispatchTarget,
    WorkerSpec,
    render_kubeconfig_secret,
    render_manager,
    with_admission_checks,
    worker_target_name,
)
from scheduler.cluster.render.namespace import render_namespace
from scheduler.cluster.render.specs import FlavorSpec, QueueLine, TenantSpec
from tests.scheduler.cluster_helpers import restricted_pod, wait_for

pytestmark = pytest.mark.cluster

INSTANCE = "mk-test"  # its MultiKueue objects never touch the suite's portal's ("default")
WORKER = "local-worker"
KUEUE_NAMESPACE = "kueue-system"
MODEL = "H200-141GB"  # on both clusters' KWOK nodes (worker.NODES)
GPU = "nvidia.com/gpu"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass
class Fleet:
    manager: KubeGateway
    worker: KubeGateway
    check: str  # the AdmissionCheck that dispatches to the worker


def _condition(obj: dict | None, kind: str) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def _flavors() -> list[dict]:
    # as the portal's reconcile renders the model's flavor (reconcile/specs.flavor_specs)
    return render_flavors(
        [FlavorSpec(MODEL.lower(), product_label(MODEL), tuple(gpu_tolerations()))]
    )


@pytest.fixture(scope="module")
def fleet(kube_cluster, kube_worker) -> Fleet:
    manager = KubeGateway.from_kubeconfig(str(kube_cluster.kubeconfig))
    remote = KubeGateway.from_kubeconfig_text(worker.kubeconfig_text())
    secret = render_kubeconfig_secret(
        WORKER, worker.kubeconfig_text(), namespace=KUEUE_NAMESPACE, instance=INSTANCE
    )
    target = DispatchTarget(
        worker_target_name(INSTANCE, WORKER),
        (WorkerSpec(name=WORKER, secret=secret["metadata"]["name"]),),
    )
    mk_objects = render_manager([target], INSTANCE)
    manager.apply(secret)
    for obj in mk_objects:
        manager.apply(obj)
    for gateway in (manager, remote):
        for flavor in _flavors():
            gateway.apply(flavor)
    cluster_name = next(o for o in mk_objects if o["kind"] == "MultiKueueCluster")
    wait_for(
        "the worker's MultiKueueCluster active on the manager (a manager's Kueue with "
        "MultiKueue off leaves it without status: `python -m localcluster up` restarts it "
        "with localcluster/kueue.py's gates)",
        lambda: _condition(
            manager.get("MultiKueueCluster", cluster_name["metadata"]["name"]), "Active"
        ),
        timeout=60,
    )
    wait_for(
        "the MultiKueue AdmissionCheck active",
        lambda: _condition(manager.get("AdmissionCheck", target.name), "Active"),
        timeout=30,
    )
    yield Fleet(manager=manager, worker=remote, check=target.name)
    for obj in reversed(mk_objects):
        manager.delete(obj["kind"], obj["metadata"]["name"])
    manager.delete("Secret", secret["metadata"]["name"], KUEUE_NAMESPACE)


def _team_spec(prefix: str) -> TenantSpec:
    slug = f"{prefix}-{uuid.uuid4().hex[:6]}"
    per_class = os.environ.get("GPU_QUOTA_UNIT") == slices.UNIT_CLASS
    line = QueueLine(
        MODEL.lower(),
        GPU if per_class else slices.SLICE_RESOURCE,
        2 if per_class else 2 * slices.SLICES_PER_GPU,
    )
    return TenantSpec(
        slug=slug,
        name=slug,
        active=True,
        gpu_quota={},
        gpu_resource_names=(),
        instance=INSTANCE,
        cohort=f"{slug}-cohort",  # alone: nothing of the suite's borrows from it
        queue_lines=(line,),
    )


def _set_up(gateway: KubeGateway, spec: TenantSpec, checks: tuple[str, ...] = ()) -> str:
    """The team's namespace and queues on one cluster (the ClusterQueue with `checks`)."""
    namespace = render_namespace(spec)
    name = namespace["metadata"]["name"]
    gateway.apply(namespace)
    cluster_queue, local_queue = render_queues(spec, name)
    gateway.apply(with_admission_checks(cluster_queue, checks))
    gateway.apply(local_queue)
    wait_for(
        f"ClusterQueue {name} active",
        lambda: _condition(gateway.get("ClusterQueue", name), "Active"),
        timeout=30,
    )
    wait_for(
        f"{name}'s default ServiceAccount",
        lambda: gateway.get("ServiceAccount", "default", name),
        timeout=30,
    )
    return name


def _tear_down(gateway: KubeGateway, name: str) -> None:
    for job in gateway.list("Job", name):
        gateway.delete("Job", job["metadata"]["name"], name)
    gateway.delete("Namespace", name)
    gateway.delete("ClusterQueue", name)


@pytest.fixture
def team(fleet):
    """A team granted 2 H200s on the worker: its namespace and LocalQueue on both clusters, its
    ClusterQueue on the manager with the MultiKueue check and on the worker with the quota."""
    spec = _team_spec("mk")
    name = _set_up(fleet.manager, spec, (fleet.check,))
    _set_up(fleet.worker, spec)
    yield name
    _tear_down(fleet.manager, name)
    _tear_down(fleet.worker, name)


@pytest.fixture
def local_team(fleet):
    """A team whose queue on the manager has no check: the manager runs its work."""
    spec = _team_spec("local")
    name = _set_up(fleet.manager, spec)
    yield name
    _tear_down(fleet.manager, name)


def _gpu_job(name: str, namespace: str) -> dict:
    pod = restricted_pod("main", {GPU: 1})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: LOCAL_QUEUE}},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {"metadata": {}, "spec": pod["spec"]},
        },
    }


def _pods(gateway: KubeGateway, namespace: str, job: str) -> list[dict]:
    return gateway.list("Pod", namespace, label_selector=f"batch.kubernetes.io/job-name={job}")


def _running(gateway: KubeGateway, namespace: str, job: str) -> list[dict]:
    return [
        p
        for p in _pods(gateway, namespace, job)
        if (p.get("status") or {}).get("phase") == "Running"
    ]


def test_a_job_in_a_multikueue_queue_runs_on_the_worker_and_goes_with_its_manager_copy(fleet, team):
    created = fleet.manager.create(_gpu_job("train", team))
    # Kueue's webhook hands the manager's copy to MultiKueue (not to the Job controller)
    assert created["spec"].get("managedBy") == "kueue.x-k8s.io/multikueue"

    remote = wait_for(
        "the Job dispatched to the worker",
        lambda: fleet.worker.get("Job", "train", team),
        timeout=60,
    )
    assert not remote["spec"].get("managedBy")  # the worker's Job controller runs it
    pods = wait_for(
        "its pod Running on the worker",
        lambda: _running(fleet.worker, team, "train"),
        timeout=60,
    )
    assert pods[0]["spec"]["nodeName"] in worker.NODES
    assert pods[0]["spec"]["nodeName"] == "gpu-h200-0"  # the flavor's product label

    # admitted on the manager once the worker admitted it; nothing runs there
    manager_workload = wait_for(
        "the manager's Workload admitted",
        lambda: next(
            (w for w in fleet.manager.list("KueueWorkload", team) if _condition(w, "Admitted")),
            None,
        ),
        timeout=60,
    )
    checks = manager_workload["status"].get("admissionChecks") or []
    assert [(c["name"], c["state"]) for c in checks] == [(fleet.check, "Ready")]
    assert any(
        _condition(w, "Admitted") for w in fleet.worker.list("KueueWorkload", team)
    )  # the worker's Kueue admitted its copy against the worker's quota
    # the status comes back: one pod active, as on the worker
    mirrored = wait_for(
        "the worker's status on the manager's Job",
        lambda: (fleet.manager.get("Job", "train", team) or {}).get("status", {}).get("active"),
        timeout=60,
    )
    assert mirrored == 1
    assert _pods(fleet.manager, team, "train") == []

    fleet.manager.delete("Job", "train", team)
    wait_for(
        "the worker's Job gone with the manager's",
        lambda: fleet.worker.get("Job", "train", team) is None,
        timeout=90,
        interval=0.5,
    )


def test_a_queue_without_the_check_runs_on_the_manager_itself(fleet, local_team):
    fleet.manager.create(_gpu_job("local", local_team))
    pods = wait_for(
        "its pod Running on the manager",
        lambda: _running(fleet.manager, local_team, "local"),
        timeout=60,
    )
    assert pods[0]["spec"]["nodeName"] == "gpu-h200-0"
    job = fleet.manager.get("Job", "local", local_team)
    assert not job["spec"].get("managedBy")
    assert fleet.worker.get("Namespace", local_team) is None  # never reached the worker
