"""Rollout pieces: the published ConfigMaps (pure), a node whose MIG manager never answers and a
node already labelled (on the real cluster), and resuming a stuck plan."""

import uuid

import pytest
import yaml

from localcluster.fleet import gpu_tolerations, node_manifest
from localcluster.pytest_plugin import wait_for
from scheduler.mig import publishing, rollout
from scheduler.mig.models import Plan
from tenants.models import AuditEvent
from tests.scheduler.cluster_helpers import gpu_pod_on, no_disruption_budget


def test_config_manifests_carry_every_config(settings):
    settings.PORTAL_INSTANCE = "x"
    mig = {"portal-a100-80gb-abc": [{"devices": [0], "mig-enabled": True, "mig-devices": {}}]}
    ns, mig_cm, dp_cm = publishing.config_manifests(mig, {"default": {"version": "v1"}})
    assert ns["kind"] == "Namespace" and ns["metadata"]["name"] == "gpu-operator"
    assert mig_cm["metadata"]["name"] == "gpu-portal-x-mig-parted-config"
    assert mig_cm["metadata"]["labels"]["gpu-portal/config"] == "mig-parted"
    assert yaml.safe_load(mig_cm["data"]["config.yaml"]) == {"version": "v1", "mig-configs": mig}
    assert yaml.safe_load(dp_cm["data"]["default"]) == {"version": "v1"}


@pytest.fixture
def unanswered_node(kube_admin, kube_namespace):
    """A real (KWOK) A100 node with a running pod, but without the product label the simulated
    MIG manager watches: relabel it and nothing ever answers, as with a dead MIG manager."""
    name = f"silent-{uuid.uuid4().hex[:6]}"
    manifest = node_manifest(
        {
            "name": name,
            "model": "A100-80GB",
            "gpus": 1,
            "migConfig": "all-1g.10gb",
            "devicePluginConfig": "default",
        }
    )
    del manifest["metadata"]["labels"]["nvidia.com/gpu.product"]
    kube_admin.create(manifest)
    wait_for(
        "node Ready",
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (kube_admin.get("Node", name) or {}).get("status", {}).get("conditions", [])
        ),
    )
    kube_admin.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "busy", "namespace": kube_namespace},
            "spec": {
                "nodeName": name,
                "terminationGracePeriodSeconds": 0,
                "tolerations": gpu_tolerations(),
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
    )
    wait_for(
        "pod running",
        lambda: kube_admin.get("Pod", "busy", kube_namespace)["status"].get("phase") == "Running",
    )
    yield name
    kube_admin.delete("Node", name)


@pytest.mark.cluster
@pytest.mark.django_db
def test_a_node_that_never_answers_times_out_and_stays_cordoned(kube, unanswered_node):
    plan = Plan.objects.create()
    entry = {"node": unanswered_node, "mig_config": "all-balanced", "device_plugin_config": ""}
    ok, message = rollout.apply_node(kube, plan, entry, timeout_s=1.0)
    assert not ok and "timed out" in message and "cordoned" in message
    node = kube.get("Node", unanswered_node)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "pending"
    assert node["metadata"]["labels"]["nvidia.com/mig.config"] == "all-balanced"


@pytest.mark.cluster
@pytest.mark.django_db
def test_a_node_already_labelled_is_left_alone(kube, unanswered_node):
    plan = Plan.objects.create()
    node = kube.get("Node", unanswered_node)
    writes = kube.stats.writes
    entry = {"node": unanswered_node, "mig_config": "all-1g.10gb", "device_plugin_config": ""}
    assert rollout.apply_node(kube, plan, entry) == (True, "already labelled")
    # nothing written by the portal: no label, no cordon (KWOK keeps writing the new node's
    # status, so its resourceVersion is not the portal's to answer for)
    assert kube.stats.writes == writes
    after = kube.get("Node", unanswered_node)

    def nvidia(n):  # the labels a rollout writes (KWOK adds kubernetes.io ones of its own)
        return {k: v for k, v in n["metadata"]["labels"].items() if k.startswith("nvidia.com/")}

    assert nvidia(after) == nvidia(node)
    assert after["spec"].get("unschedulable") == node["spec"].get("unschedulable")


def test_only_an_applying_plan_without_a_live_worker_silent_for_a_hand_over_is_stuck(settings):
    from datetime import timedelta

    from django.utils import timezone

    settings.MIG_ROLLOUT_HANDOVER_S = 10
    now = timezone.now()
    # between two steps: the next task is queued, not picked up yet
    fresh = Plan(status=Plan.Status.APPLYING, started_at=now - timedelta(seconds=5))
    old = Plan(status=Plan.Status.APPLYING, started_at=now - timedelta(hours=1))
    done = Plan(status=Plan.Status.APPLIED, started_at=now - timedelta(hours=1))
    assert not fresh.is_stuck(now) and old.is_stuck(now) and not done.is_stuck(now)
    # a long rollout that beat a second ago
    beating = Plan(
        status=Plan.Status.APPLYING,
        started_at=now - timedelta(hours=1),
        heartbeat_at=now - timedelta(seconds=1),
    )
    assert not beating.is_stuck(now)
    # a worker that holds the lease is alive, however long its step has been silent
    assert not old.is_stuck(now, worker_alive=True)


_HOLD_LEASE = """
import sys, time, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
conn.execute("SELECT pg_advisory_lock(%s, %s)", [int(sys.argv[2]), int(sys.argv[3])])
print("held", flush=True)
time.sleep(600)
"""


def _worker_holding_the_lease(plan_id: int):
    """A separate process holding the plan's lease on its own session, as a worker's step
    does (killed with SIGKILL by the test, like the fault run's worker)."""
    import subprocess
    import sys

    from django.db import connection

    params = connection.get_connection_params()
    dsn = " ".join(
        f"{k}={params[k]}" for k in ("host", "port", "dbname", "user", "password") if params.get(k)
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LEASE, dsn, str(rollout.ROLLOUT_LEASE), str(plan_id)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.django_db(transaction=True)
def test_a_rollout_is_stuck_the_moment_its_worker_is_killed_not_a_step_limit_later(settings):
    """The lease is a PostgreSQL advisory lock on the worker's session: alive while the worker
    lives (however long its step), gone when the process dies, so the rollout is stuck a
    hand-over after its last sign of life."""
    import signal
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.mig import tasks as mig_tasks
    from tests.tenants.factories import PlatformAdminFactory

    settings.MIG_ROLLOUT_HANDOVER_S = 10
    admin = PlatformAdminFactory()
    plan = Plan.objects.create(
        status=Plan.Status.APPLYING,
        started_at=timezone.now() - timedelta(hours=1),
        heartbeat_at=timezone.now() - timedelta(minutes=1),
        rollout_id="alive",
        applied_by=admin,
    )
    worker = _worker_holding_the_lease(plan.pk)
    try:
        assert not rollout.is_stuck(plan)
        assert mig_tasks.resume_stuck_rollouts() == 0
        # a second worker's step (a redelivered message, a resume) does nothing meanwhile
        assert rollout.step(None, plan.pk, "alive", actor=admin) is False
        with rollout.lease(plan.pk) as got:
            assert not got
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    wait_for("the killed worker's lease freed", lambda: rollout.is_stuck(plan), timeout=5)
    with rollout.lease(plan.pk) as got:
        assert got
        # the worker that took the lease may resume it: its own lease is not another's
        assert rollout.is_stuck(plan)


def _pod(name, *, priority=0, gpus=True, owner=None, deleting=False, phase="Running"):
    meta = {"name": name, "namespace": "ns"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x"}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    resources = {"limits": {"nvidia.com/mig-1g.10gb": "1"}} if gpus else {}
    return {
        "metadata": meta,
        "spec": {"priority": priority, "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": phase},
    }


def test_a_drain_moves_gpu_pods_lowest_priority_first_and_leaves_the_rest():
    pods = [
        _pod("high", priority=900_000),
        _pod("low", priority=100_000),
        _pod("none"),
        _pod("plain", gpus=False),  # no GPU: the MIG change does not touch it
        _pod("plugin", owner="DaemonSet"),  # the GPU operator's own
        _pod("leaving", deleting=True),
        _pod("done", phase="Succeeded"),
        _pod("rs", owner="ReplicaSet", priority=100_000),
    ]
    assert [p["metadata"]["name"] for p in rollout.drain_order(pods)] == [
        "none",
        "low",
        "rs",
        "high",
    ]


@pytest.mark.cluster
@pytest.mark.django_db
def test_a_node_is_drained_before_it_is_relabelled(
    kube, kube_admin, kube_namespace, unanswered_node
):
    gpu_pod_on(kube_admin, kube_namespace, unanswered_node, "trainer")
    plan = Plan.objects.create()
    entry = {"node": unanswered_node, "mig_config": "all-balanced", "device_plugin_config": ""}
    ok, message = rollout.apply_node(kube, plan, entry, timeout_s=1.0, drain_timeout_s=30)
    # the GPU pod was evicted (and is gone) before the relabel; the pod without GPUs stays
    assert kube.get("Pod", "trainer", kube_namespace) is None
    assert kube.get("Pod", "busy", kube_namespace)["status"]["phase"] == "Running"
    assert not ok and "timed out" in message  # nothing answers on this node
    assert entry["cordoned"] is True
    verbs = list(
        AuditEvent.objects.filter(object_id=str(plan.pk))
        .order_by("id")
        .values_list("verb", flat=True)
    )
    assert verbs == ["node.cordoned", "node.drained", "node.relabelled"]


@pytest.mark.cluster
@pytest.mark.django_db
def test_a_disruption_budget_stops_the_drain_and_nothing_is_relabelled(
    kube, kube_admin, kube_namespace, unanswered_node
):
    gpu_pod_on(kube_admin, kube_namespace, unanswered_node, "guarded", labels={"app": "guarded"})
    kube_admin.create(no_disruption_budget("guarded", kube_namespace, {"app": "guarded"}))
    wait_for(
        "the budget's status",
        lambda: (
            "disruptionsAllowed"
            in (kube_admin.get("PodDisruptionBudget", "guarded", kube_namespace) or {}).get(
                "status", {}
            )
        ),
    )
    plan = Plan.objects.create()
    entry = {"node": unanswered_node, "mig_config": "all-balanced", "device_plugin_config": ""}
    ok, message = rollout.apply_node(kube, plan, entry, timeout_s=1.0, drain_timeout_s=2.0)
    assert not ok
    assert f"PodDisruptionBudget allows no disruption of {kube_namespace}/guarded" in message
    assert "left cordoned" in message
    node = kube.get("Node", unanswered_node)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["nvidia.com/mig.config"] == "all-1g.10gb"  # untouched
    assert kube.get("Pod", "guarded", kube_namespace)["status"]["phase"] == "Running"


@pytest.mark.cluster
@pytest.mark.django_db
def test_a_node_a_dead_worker_relabelled_is_waited_on_not_taken_as_done(kube, unanswered_node):
    kube.merge_patch(
        "Node",
        unanswered_node,
        {
            "metadata": {
                "labels": {
                    "nvidia.com/mig.config": "all-balanced",
                    "nvidia.com/mig.config.state": "pending",
                }
            }
        },
    )
    plan = Plan.objects.create()
    entry = {"node": unanswered_node, "mig_config": "all-balanced", "device_plugin_config": ""}
    ok, message = rollout.apply_node(kube, plan, entry, timeout_s=1.0)
    assert not ok and "timed out" in message


@pytest.mark.cluster
@pytest.mark.django_db
def test_a_stuck_rollout_is_resumed_by_the_task_and_a_running_one_left_alone(kube):
    from datetime import timedelta

    from django.utils import timezone

    from scheduler import tasks
    from tenants.models import AuditEvent
    from tests.tenants.factories import PlatformAdminFactory

    admin = PlatformAdminFactory()
    running = Plan.objects.create(status=Plan.Status.APPLYING, started_at=timezone.now())
    run = {"plan_id": running.pk, "actor_id": admin.pk}
    assert tasks.apply_plan.apply(kwargs=run).get() == "applying"
    stuck = Plan.objects.create(
        status=Plan.Status.APPLYING, started_at=timezone.now() - timedelta(hours=1)
    )
    assert tasks.apply_plan.apply(kwargs={"plan_id": stuck.pk, "actor_id": admin.pk}).get() == (
        "applied"
    )
    assert AuditEvent.objects.filter(verb="plan.apply_resumed").count() == 1
    running.refresh_from_db()
    assert running.status == Plan.Status.APPLYING
