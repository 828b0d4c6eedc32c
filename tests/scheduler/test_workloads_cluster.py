"""Workloads on the real local cluster (KWOK nodes): create, follow, logs, cancel, preemption."""

import time
from datetime import timedelta

import pytest

from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.workloads import services as workloads
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.lifecycle import logs as pod_logs
from scheduler.workloads.lifecycle import side_by_side, watching
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.models import Workload
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import AuditEvent
from tenants.services.grants import grant_quota
from tests.scheduler.cluster_helpers import h100_h200_team, wait_for, wait_for_quota

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


@pytest.fixture
def team(kube, tenant_namespaces, world):
    """A fresh tenant, reconciled, with MIG slices of the H100 and whole H200s granted."""
    tenant, mig, h200 = h100_h200_team(world, kube, tenant_namespaces, "wl", "Workloads")
    grant_quota(actor=world.admin, tenant=tenant, resource_class=mig, amount=2)
    grant_quota(actor=world.admin, tenant=tenant, resource_class=h200, amount=9)
    reconcile_tenant(kube, tenant.pk)
    wait_for_quota(kube, tenant_namespaces[-1])
    tenant.refresh_from_db()
    return tenant, mig, h200


def submit(world, tenant, rc, units=1, **kw):
    args = dict(
        actor=world.admin,
        tenant=tenant,
        name="train",
        kind="job",
        image="registry.k8s.io/pause:3.10",
        resources={rc.slug: units},
        priority="gpu-low",
    )
    args.update(kw)
    actor, tenant = args.pop("actor"), args.pop("tenant")
    return workloads.submit_workload(actor=actor, tenant=tenant, spec=workload_spec(**args))


def wait_state(kube, workload, state, timeout=60):
    def check():
        w = workload_sync.sync_workload(kube, workload.pk)
        return w if w.state == state else None

    return wait_for(f"workload {workload.name} {state}", check, timeout=timeout)


def test_a_mig_job_is_created_runs_on_its_model_and_is_cancelled(kube, team, world):
    tenant, mig, _ = team
    w = submit(world, tenant, mig)

    w = workload_sync.create_in_cluster(kube, w.pk)
    assert w.k8s_uid and w.cluster_created_at
    job = kube.get("Job", w.k8s_name, w.namespace)
    # Kueue admitted it on the H100 flavor: the model's product label, as GFD sets it
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"
    }
    # safe to run twice: nothing new
    writes = kube.stats.writes
    workload_sync.create_in_cluster(kube, w.pk)
    assert kube.stats.writes == writes

    w = wait_state(kube, w, "running")
    pods = kube.list("Pod", w.namespace, label_selector=f"gpu-portal.io/workload={w.pk}")
    assert pods[0]["spec"]["nodeName"] == "gpu-h100-0"
    assert AuditEvent.objects.filter(verb="workload.running", object_id=str(w.pk)).count() == 1
    reasons = [e.reason for e in w.events.all()]
    # between creation and running it may be seen waiting for Kueue's admission for a moment
    assert reasons[:2] == ["Submitted", "Created"] and reasons[-1] == "Running"
    assert set(reasons[2:-1]) <= {"Pending", "WaitingForQueue"}

    # KWOK pods have no container and so no log: a clear refusal, not a 500.
    # (said as what a simulated node means, not as the API server's error)
    with pytest.raises(pod_logs.LogsUnavailable, match="runs on a simulated node: .* no logs"):
        pod_logs.workload_logs(kube, actor=world.admin, workload=w)

    w = workloads.cancel_workload(actor=world.admin, workload=w)
    assert w.state == "cancelled"
    assert workload_sync.delete_from_cluster(kube, w.pk) is True
    wait_for("job gone", lambda: kube.get("Job", w.k8s_name, w.namespace) is None)


def test_a_deployment_runs_its_replicas(kube, team, world):
    tenant, mig, _ = team
    w = submit(world, tenant, mig, kind="deployment", replicas=2, name="serve")
    workload_sync.create_in_cluster(kube, w.pk)

    def all_running():  # Kueue admits the pods one by one: "1/2 running" comes first
        current = workload_sync.sync_workload(kube, w.pk)
        return current if current.reason == "Running" else None

    w = wait_for("both replicas running", all_running, timeout=60)
    assert (w.state, w.message) == ("running", "2/2 running")
    workloads.cancel_workload(actor=world.admin, workload=w)
    workload_sync.delete_from_cluster(kube, w.pk)


def test_an_autoscaled_deployment_gets_an_hpa_that_the_api_server_accepts_and_cancel_deletes(
    kube, team, world
):
    tenant, mig, _ = team
    w = submit(
        world,
        tenant,
        mig,
        kind="deployment",
        name="serve-hpa",
        autoscaling={"min_replicas": 1, "max_replicas": 2, "target_gpu_util": 70,
                     "target_latency_ms": 250},
    )  # fmt: skip
    w = workload_sync.create_in_cluster(kube, w.pk)
    hpa = kube.get("HorizontalPodAutoscaler", w.k8s_name, w.namespace)
    assert hpa is not None
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": w.k8s_name,
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 2)
    assert [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]] == [
        "DCGM_FI_DEV_GPU_UTIL",
        "http_request_duration_seconds_p95",
    ]
    assert hpa["metadata"]["labels"]["gpu-portal.io/workload"] == str(w.pk)
    assert hpa["metadata"]["ownerReferences"][0]["uid"] == w.k8s_uid
    assert [e.reason for e in w.events.all()][-1] == "Created"
    w = wait_state(kube, w, "running")

    w = workloads.cancel_workload(actor=world.admin, workload=w)
    assert workload_sync.delete_from_cluster(kube, w.pk) is True
    assert kube.get("HorizontalPodAutoscaler", w.k8s_name, w.namespace) is None
    wait_for("deployment gone", lambda: kube.get("Deployment", w.k8s_name, w.namespace) is None)


def test_a_pod_the_api_server_refuses_keeps_the_workload_pending_with_the_reason(kube, team, world):
    """Quota on the cluster is the second line: a workload admitted by the portal whose pods the
    API server refuses (its ResourceQuota was set to zero behind the portal's back) says why."""
    tenant, mig, _ = team
    w = submit(world, tenant, mig)
    kube.merge_patch(
        "ResourceQuota",
        "gpu-portal-quota",
        {"spec": {"hard": {"requests.nvidia.com/mig-3g.40gb": "0"}}},
        w.namespace,
    )
    wait_for(
        "quota lowered",
        lambda: (
            kube.get("ResourceQuota", "gpu-portal-quota", w.namespace)["status"]["hard"][
                "requests.nvidia.com/mig-3g.40gb"
            ]
            == "0"
        ),
    )
    workload_sync.create_in_cluster(kube, w.pk)

    def refused():
        current = workload_sync.sync_workload(kube, w.pk)
        return current if current.reason == "FailedCreate" else None

    w = wait_for("FailedCreate", refused, timeout=60)
    assert w.state == "pending"
    assert "exceeded quota" in w.message


def test_a_job_whose_command_sleeps_succeeds_after_that_time_or_fails_with_its_exit_code(
    kube, team, world
):
    """The local cluster runs a Job's `sleep N` for N seconds (KWOK stages in
    localcluster/kwok-stages.yaml): it succeeds, or fails with the code of an `exit C`, so
    `gpu-portal submit --wait -- sleep 1` ends locally as it would on a real cluster."""
    tenant, _, h200 = team
    ok = submit(world, tenant, h200, name="sleeps", command=["sleep", "1"])
    bad = submit(world, tenant, h200, name="fails", command=["sh", "-c", "sleep 1; exit 3"])
    forever = submit(world, tenant, h200, name="trains", command=["python", "train.py"])
    for w in (ok, bad, forever):
        workload_sync.create_in_cluster(kube, w.pk)

    ok = wait_state(kube, ok, "succeeded")
    assert ok.finished_at is not None
    bad = wait_state(kube, bad, "failed")
    assert "container main exited with code 3" in bad.message
    # a command that does not say how long it runs keeps running, as the other tests expect
    assert workload_sync.sync_workload(kube, forever.pk).state == "running"


def test_a_job_done_between_two_syncs_reads_the_run_time_the_cluster_measured(kube, team, world):
    """Issue 35, 6: the portal looks only after the job has finished; its run time is still the
    command's (the containers' start and end), not "not started" nor the time between syncs."""
    tenant, _, h200 = team
    quick = submit(world, tenant, h200, name="naps", command=["sleep", "2"])
    workload_sync.create_in_cluster(kube, quick.pk)

    def finished_pod():
        pods = kube.list("Pod", quick.namespace, label_selector=f"{WORKLOAD_LABEL}={quick.pk}")
        return any((p.get("status") or {}).get("phase") == "Succeeded" for p in pods)

    wait_for("the pod to succeed", finished_pod, timeout=60)
    time.sleep(2)  # the sync comes late, as a periodic one does
    done = wait_state(kube, quick, "succeeded")
    assert done.started_at is not None
    # the cluster's times are whole seconds: up to one lost at each end
    assert timedelta(seconds=1) <= done.finished_at - done.started_at <= timedelta(seconds=4)
    assert [e.state for e in done.events.all()][-2:] == ["running", "succeeded"]


def test_a_critical_job_takes_the_node_from_a_low_one_which_waits_to_run_again(kube, team, world):
    """9 H200s granted on an 8-GPU node: Kueue admits both, the scheduler preempts the low pod
    for the critical one, and the low job's pod is replaced (not failed) and waits for room."""
    tenant, _, h200 = team
    low = submit(world, tenant, h200, units=8, name="low")
    workload_sync.create_in_cluster(kube, low.pk)
    low = wait_state(kube, low, "running")

    high = submit(world, tenant, h200, units=1, name="high", priority="gpu-critical")
    workload_sync.create_in_cluster(kube, high.pk)

    wait_state(kube, high, "running", timeout=90)

    def replaced_and_waiting():
        w = workload_sync.sync_workload(kube, low.pk)
        return w if (w.state, w.reason) == ("pending", "Unschedulable") else None

    low = wait_for("the low job's new pod waiting for room", replaced_and_waiting, timeout=90)
    assert low.finished_at is None
    assert kube.get("Job", low.k8s_name, low.namespace) is not None  # its work is not lost
    assert Workload.objects.get(pk=low.pk).state == "pending"


def test_the_full_sync_reads_each_namespace_once(kube, team, world):
    """The full resync (the periodic sync's first run, after an expired cursor and every
    SYNC_WORKLOADS_FULL_EVERY_S) lists pods, events, Kueue's Workloads, Jobs and Deployments
    once per namespace, not per workload: five lists a namespace and no GET. The periodic runs
    in between read only what changed (tests/scheduler/test_workload_sync_cluster.py)."""
    tenant, mig, _ = team
    jobs = [submit(world, tenant, mig, name=f"j{i}") for i in range(3)]
    for w in jobs:
        workload_sync.create_in_cluster(kube, w.pk)
    before = dict(kube.stats.calls)
    assert side_by_side.sync_all_live_workloads(kube) == 3
    calls = {k: n - before.get(k, 0) for k, n in kube.stats.calls.items() if n != before.get(k)}
    assert calls == {
        ("list", "Pod"): 1,
        ("list", "Event"): 1,
        ("list", "KueueWorkload"): 1,
        ("list", "Job"): 1,
        ("list", "Deployment"): 1,
    }
    # the periodic sync's first run begins with that full read (and watches from there), after
    # taking a watch cursor per kind (a one-item list each) and listing Kueue's Workloads once
    # cluster-wide (work made outside the portal and not followed yet: lifecycle/following.py)
    before = dict(kube.stats.calls)
    assert watching.sync_live_workloads(kube, full=True) == 3  # the read alone
    calls = {k: n - before.get(k, 0) for k, n in kube.stats.calls.items() if n != before.get(k)}
    assert calls == {
        ("list", "Job"): 2,
        ("list", "Deployment"): 2,
        ("list", "Pod"): 2,
        ("list", "Event"): 2,
        ("list", "KueueWorkload"): 3,
    }
    # and the states it reads are the same as one workload's own sync would find
    for w in jobs:
        assert Workload.objects.get(pk=w.pk).state in ("queued", "pending", "running")
    wait_for(
        "the two that fit the grant running, the third queued",
        lambda: (
            watching.sync_live_workloads(kube)
            and sorted(Workload.objects.filter(tenant=tenant).values_list("state", flat=True))
            == ["queued", "running", "running"]
        ),
        timeout=60,
    )
