"""The periodic workload sync on the real local cluster: it reads what changed since its last
run (a watch per kind from cursors kept in PostgreSQL), so an unchanged fleet costs the same
whatever its size; a change is picked up by the next run, or by the run it happens in as it
arrives; an expired cursor and the periodic full resync read everything again."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import side_by_side, watching
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.models import Workload, WorkloadSyncState
from scheduler.workloads.submit.spec import workload_spec
from tenants.services.grants import grant_quota
from tests.scheduler.cluster_helpers import (
    h100_h200_team,
    restricted_pod,
    wait_for,
    wait_for_quota,
)

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

KINDS = ("Job", "Deployment", "Pod", "KueueWorkload", "Event")
WATCHES = {("watch", kind): 1 for kind in KINDS}


@pytest.fixture
def team(kube, tenant_namespaces, world):
    """A fresh tenant with two H100 MIG slices granted: two jobs run, the rest wait in Kueue."""
    tenant, mig, _ = h100_h200_team(world, kube, tenant_namespaces, "ws", "Watched")
    grant_quota(actor=world.admin, tenant=tenant, resource_class=mig, amount=2)
    reconcile_tenant(kube, tenant.pk)
    wait_for_quota(kube, tenant.namespace)
    tenant.refresh_from_db()
    return tenant, mig


def submit_jobs(kube, world, tenant, rc, names):
    jobs = []
    for name in names:
        w = workloads.submit_workload(
            actor=world.admin,
            tenant=tenant,
            spec=workload_spec(
                name=name,
                kind="job",
                image="registry.k8s.io/pause:3.10",
                resources={rc.slug: 1},
                priority="gpu-low",
            ),
        )
        jobs.append(workload_sync.create_in_cluster(kube, w.pk))
    return jobs


def sync_calls(kube, **kw) -> tuple[int, dict]:
    """One periodic sync: (workloads it looked at, the API calls it made)."""
    before = dict(kube.stats.calls)
    looked_at = watching.sync_live_workloads(kube, **kw)
    calls = {k: n - before.get(k, 0) for k, n in kube.stats.calls.items() if n != before.get(k)}
    return looked_at, calls


def settle(kube, timeout=120):
    """Sync until a run finds nothing changed: Kueue has admitted what fits and the pods run.
    Such a run costs one watch per kind and nothing else (the full path would cost five lists
    a namespace). The cluster is shared with other tests, whose changes (a node they
    take down, a cohort they change) may touch our workloads for a run or two: hence a wait,
    not a single run."""
    wait_for("a sync with nothing changed", lambda: sync_calls(kube) == (0, WATCHES), timeout)


def states(tenant):
    return sorted(Workload.objects.filter(tenant=tenant).values_list("state", flat=True))


def finish(kube_admin, kube, workload):
    """Its pod succeeds, as the kubelet would report, and the Job completes."""
    pod = kube.list(
        "Pod", workload.namespace, label_selector=f"gpu-portal.io/workload={workload.pk}"
    )[0]
    kube_admin.apply_status(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod["metadata"]["name"], "namespace": workload.namespace},
            "status": {"phase": "Succeeded"},
        }
    )
    wait_for(
        "the Job complete",
        lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in (
                kube.get("Job", workload.k8s_name, workload.namespace).get("status") or {}
            ).get("conditions")
            or []
        ),
    )


def test_an_unchanged_fleet_costs_one_watch_per_kind_whatever_its_size(kube, team, world):
    tenant, mig = team
    submit_jobs(kube, world, tenant, mig, [f"a{i}" for i in range(3)])
    looked_at, calls = sync_calls(kube, full=True)  # a full resync alone, cursors taken
    assert looked_at == 3
    assert {k for k, n in calls.items() if n} >= {("list", kind) for kind in KINDS}
    settle(kube)  # 3 live workloads, nothing changed: 5 watches
    assert states(tenant) == ["queued", "running", "running"]

    submit_jobs(kube, world, tenant, mig, [f"b{i}" for i in range(9)])
    settle(kube)  # 12 live workloads, nothing changed: the same 5 watches
    assert states(tenant) == ["queued"] * 10 + ["running"] * 2

    # the full path the periodic one replaces: a namespace's reading, five lists, no GET
    before = dict(kube.stats.calls)
    assert side_by_side.sync_all_live_workloads(kube) == 12
    spent = {k: n - before.get(k, 0) for k, n in kube.stats.calls.items() if n != before.get(k)}
    assert spent == {("list", kind): 1 for kind in KINDS}


def test_a_finished_job_is_picked_up_by_the_next_sync_and_the_queue_moves_up(
    kube, kube_admin, team, world
):
    tenant, mig = team
    submit_jobs(kube, world, tenant, mig, [f"f{i}" for i in range(6)])
    settle(kube)
    running = [w for w in Workload.objects.filter(tenant=tenant) if w.state == "running"]
    assert len(running) == 2
    queued = Workload.objects.filter(tenant=tenant, state="queued").order_by("queue_position")
    assert [w.queue_position for w in queued] == [1, 2, 3, 4]
    done = running[0]
    finish(kube_admin, kube, done)

    looked_at, calls = sync_calls(kube)  # the next run sees it
    done.refresh_from_db()
    assert (done.state, done.reason) == ("succeeded", "Completed")
    # it read nothing but its watches: the namespace's reading, made by an earlier run of this
    # worker, is taken on from the last one and brought up to date from the watches, however
    # many batches the run's changes came in (Kueue's admission in the freed place, the next
    # pod's start); a namespace's reading holds its Jobs, so no GET either
    assert looked_at >= 1
    assert set(calls) == set(WATCHES)

    # Kueue admits the next one in the freed place: picked up too, and the queue moves up
    wait_for(
        "the next job running and the queue moved up",
        lambda: (
            sync_calls(kube)
            and states(tenant) == ["queued"] * 3 + ["running"] * 2 + ["succeeded"]
            and sorted(
                Workload.objects.filter(tenant=tenant, state="queued").values_list(
                    "queue_position", flat=True
                )
            )
            == [1, 2, 3]
        ),
        timeout=60,
    )


def test_an_expired_cursor_falls_back_to_a_full_resync_which_repairs_what_was_missed(
    kube, team, world
):
    tenant, mig = team
    first, second = submit_jobs(kube, world, tenant, mig, ["e0", "e1"])
    settle(kube)
    # history the API server no longer keeps, and a Job deleted behind the portal's back
    state = WorkloadSyncState.objects.get()
    state.cursors = dict.fromkeys(state.cursors, "1")
    state.save()
    kube.delete("Job", second.k8s_name, second.namespace, propagation="Foreground")
    wait_for("job gone", lambda: kube.get("Job", second.k8s_name, second.namespace) is None)

    looked_at, calls = sync_calls(kube)
    assert looked_at == 2  # every live workload, as in a full resync
    assert ("watch", "Job") in calls  # it tried, got 410 Gone (the rest may not even start)
    assert all(calls[("list", kind)] >= 1 for kind in KINDS)  # and listed for new cursors
    assert ("get", "Job") not in calls  # the namespace's reading holds its Jobs
    state.refresh_from_db()
    assert "1" not in state.cursors.values()
    # a full read cannot say how a gone Job ended: the next run's watch can (here: nothing
    # finished, it was deleted)
    assert state.retry_ids == [second.pk]
    second.refresh_from_db()
    assert second.state != "failed"
    sync_calls(kube)
    second.refresh_from_db()
    assert (second.state, second.reason) == ("failed", "Deleted")
    settle(kube)  # and it goes on from the new cursors


def test_a_retried_job_deleted_as_it_finished_ends_as_the_watch_saw_it_not_as_deleted(
    kube, kube_admin, team, world
):
    """A workload to retry (its last sync failed, or a full read found its Job gone) whose Job
    finished and was deleted since the cursors: the run's first reading lacks the Job, and only
    the watch knows how it ended. It waits for the watch, rather than ending "failed,
    Deleted" before the watch opens."""
    tenant, mig = team
    (job,) = submit_jobs(kube, world, tenant, mig, ["d0"])
    settle(kube)
    job.refresh_from_db()
    assert job.state == "running"
    finish(kube_admin, kube, job)  # after the cursors the last run saved
    kube.delete("Job", job.k8s_name, job.namespace, propagation="Foreground")
    wait_for("job gone", lambda: kube.get("Job", job.k8s_name, job.namespace) is None)
    WorkloadSyncState.objects.update(retry_ids=[job.pk])
    watching.KEPT.take({})  # another worker's run: no reading kept, the namespace read anew

    sync_calls(kube)
    job.refresh_from_db()
    assert (job.state, job.reason) == ("succeeded", "Completed")
    assert WorkloadSyncState.objects.get().retry_ids == []


def test_a_full_resync_runs_every_sync_workloads_full_every_s(kube, team, world, settings):
    settings.SYNC_WORKLOADS_FULL_EVERY_S = 300
    tenant, mig = team
    submit_jobs(kube, world, tenant, mig, ["p0"])
    settle(kube)
    WorkloadSyncState.objects.update(full_sync_at=timezone.now() - timedelta(seconds=301))
    looked_at, calls = sync_calls(kube)
    assert looked_at == 1
    # a cursor and the namespace read again (a full resync trusts no kept reading), no GET
    assert calls[("list", "Job")] == 2 and ("get", "Job") not in calls
    # and the run watches from the cursors it took, as every run: what changes after the read
    # waits for no next run
    assert all(calls[("watch", kind)] >= 1 for kind in KINDS)
    settle(kube)
    assert sync_calls(kube, full=True)[0] == 1  # and on demand


def test_a_workload_whose_sync_failed_in_a_full_resync_is_retried_by_the_next_run(
    kube, team, world
):
    tenant, mig = team
    (job,) = submit_jobs(kube, world, tenant, mig, ["r0"])
    settle(kube)
    # a namespace the API server answers 404 for: this workload's sync fails on a cluster error
    Workload.objects.filter(pk=job.pk).update(namespace=f"{job.namespace}/unreadable")
    assert sync_calls(kube, full=True)[0] == 1
    assert WorkloadSyncState.objects.get().retry_ids == [job.pk]

    Workload.objects.filter(pk=job.pk).update(namespace=job.namespace)
    looked_at, calls = sync_calls(kube)  # nothing changed on the cluster: only the retry
    assert looked_at == calls[("list", "Job")] == 1  # its namespace, never read till now
    assert ("get", "Job") not in calls
    assert WorkloadSyncState.objects.get().retry_ids == []


def queue_places(tenant):
    return sorted(
        Workload.objects.filter(tenant=tenant, state="queued").values_list(
            "queue_position", flat=True
        )
    )


def test_a_run_that_reads_many_namespaces_reads_the_cluster_whole_with_the_same_result(
    kube, team, world, settings
):
    """With SYNC_WORKLOADS_WIDE_FROM met (1 here: one team's namespace stands for many), a
    full resync reads the cluster in 8 lists whatever its size, follows the work made outside
    the portal and records the same states and places as reading namespace by namespace, with
    no GET of a Job."""
    settings.SYNC_WORKLOADS_WIDE_FROM = 1
    tenant, mig = team
    submit_jobs(kube, world, tenant, mig, ["w0", "w1", "w2"])
    outside = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "by-hand", "namespace": tenant.namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": restricted_pod("main", {mig.resource_name: 1})["spec"]},
        },
    }
    kube.create(outside)
    settle(kube)

    looked_at, calls = sync_calls(kube, full=True)
    assert looked_at == 4  # the three and the one made by hand, followed
    assert Workload.objects.get(tenant=tenant, owner_kind="Job").k8s_name == "by-hand"
    assert not {k for k in calls if k[0] == "get"}  # no GET per workload or per object
    wide = {("list", kind): 1 for kind in ("Pod", "KueueWorkload", "Job", "Deployment")}
    wide[("list", "Event")] = 4  # one per reason the sync looks at
    cursors = {("list", kind): 1 for kind in KINDS}  # one-item lists for the watches' cursors
    assert calls == {k: wide.get(k, 0) + cursors.get(k, 0) for k in {*wide, *cursors}}
    wide_result = (states(tenant), queue_places(tenant))
    assert wide_result == (["queued", "queued", "running", "running"], [1, 2])
    # every active team's namespace is read and kept, with work or not: a team's first Job
    # needs no reading of its own (in a burst, most teams' first: issue 55)
    kept = watching.KEPT.take(WorkloadSyncState.objects.get().cursors)
    assert {tenant.namespace, world.tenant.namespace, world.other_tenant.namespace} <= set(kept)
    assert kept[world.other_tenant.namespace].all_pods == []

    settings.SYNC_WORKLOADS_WIDE_FROM = 1000  # namespace by namespace: the same result
    looked_at, calls = sync_calls(kube, full=True)
    assert looked_at == 4 and calls[("list", "Job")] == 2  # a cursor and the namespace
    assert ("get", "Job") not in calls
    assert (states(tenant), queue_places(tenant)) == wide_result


@pytest.mark.django_db(transaction=True)  # committed, so the page's reader sees each change
def test_a_change_made_while_the_watches_are_open_is_synced_as_it_arrives(
    kube, kube_admin, team, world, settings
):
    """The run syncs each batch of changes as it arrives: a pod that finishes a second into
    an 8-second run shows on the page within a moment, not when the watches end (issue 55)."""
    tenant, mig = team
    (job,) = submit_jobs(kube, world, tenant, mig, ["s0"])
    settle(kube)
    settings.SYNC_WORKLOADS_WATCH_S = 8
    job.refresh_from_db()
    assert job.state == "running"
    pod = kube.list("Pod", job.namespace, label_selector=f"gpu-portal.io/workload={job.pk}")[0]
    finished_at: list[float] = []
    shown_at: list[float] = []
    run_over = threading.Event()

    def finish_pod():  # what the kubelet would report, while the run's watches are open
        time.sleep(1)
        kube_admin.apply_status(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod["metadata"]["name"], "namespace": job.namespace},
                "status": {"phase": "Succeeded"},
            }
        )
        finished_at.append(time.monotonic())

    def read_page():  # what a page would read, as often as a user could look
        try:
            while not run_over.is_set() and not shown_at:
                if Workload.objects.get(pk=job.pk).state == "succeeded":
                    shown_at.append(time.monotonic())
                time.sleep(0.1)
        finally:
            connection.close()

    threads = [threading.Thread(target=finish_pod), threading.Thread(target=read_page)]
    for thread in threads:
        thread.start()
    began = time.monotonic()
    try:
        sync_calls(kube)
    finally:
        ended = time.monotonic()
        run_over.set()
        for thread in threads:
            thread.join(15)
    assert ended - began >= 7  # the watches stayed open their 8 s
    assert finished_at and shown_at, "the finished pod was not synced in the run it happened in"
    assert shown_at[0] - finished_at[0] < 3
    assert shown_at[0] < ended - 3  # well before the watches ended
