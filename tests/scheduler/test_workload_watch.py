"""The change-driven workload sync without the cluster: which workloads a watch event concerns
(pure), queue places refreshed from Kueue's list, and one run at a time."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from core.locks import advisory_lock
from scheduler.workloads.lifecycle import side_by_side, sync, watching
from scheduler.workloads.lifecycle.reading import NamespaceReading
from scheduler.workloads.lifecycle.watching import LiveRef, touched_workloads
from scheduler.workloads.models import Workload, WorkloadSyncState
from tests.scheduler.factories import WorkloadFactory

LIVE = [
    LiveRef(5, "team-a", "train-5", "uid-5"),
    LiveRef(50, "team-a", "train-50", "uid-50"),
    LiveRef(7, "team-a", "serve-7"),
    LiveRef(9, "team-b", "eval-9", "uid-9"),
]


def ev(obj, type_="MODIFIED"):
    return {"type": type_, "object": obj}


def meta(name, namespace="team-a", **labels):
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}


def event(reason, name, namespace="team-a", kind="Pod"):
    return {
        "metadata": {"name": f"{name}.17a", "namespace": namespace},
        "reason": reason,
        "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
    }


W = "gpu-portal.io/workload"


def test_the_portals_objects_and_pods_map_by_the_workload_label():
    touched = touched_workloads(
        {
            "Job": [ev(meta("train-5", **{W: "5"}))],
            "Pod": [ev(meta("serve-7-6b9f-x2", **{W: "7"}), "DELETED")],
            "Deployment": [ev(meta("x", **{W: "not-a-number"}))],
        },
        LIVE,
    )
    assert (touched.ids, touched.queue_namespaces) == ({5, 7}, set())


def test_a_label_of_a_workload_that_is_over_or_of_another_namespace_is_ignored():
    touched = touched_workloads(
        {
            "Pod": [
                ev(meta("p", **{W: "404"})),  # not live (finished, or another database's)
                ev(meta("p", namespace="team-b", **{W: "5"})),  # 5 lives in team-a
            ]
        },
        LIVE,
    )
    assert touched.ids == set()


def test_kueues_workloads_map_by_job_uid_else_by_the_pod_they_queue_and_mark_the_queue():
    touched = touched_workloads(
        {
            "KueueWorkload": [
                ev(meta("job-train-50-8f2c1", **{"kueue.x-k8s.io/job-uid": "uid-50"})),
                ev(meta("pod-serve-7-6b9f4d7c5-x2k9q-1a2b3")),
                ev(meta("job-other-3-aaaaa", namespace="someone-else")),
            ]
        },
        LIVE,
    )
    assert touched.ids == {50, 7}
    assert touched.queue_namespaces == {"team-a"}  # not someone-else's: no workload of ours


def test_kueues_workloads_no_live_workload_accounts_for_are_handed_on_to_be_followed():
    """Work made outside the portal (or the portal's own that ended): `following.follow_new`
    decides; a deleted one is nothing to follow."""
    kubectl = meta("job-mine-1a2b3", **{"kueue.x-k8s.io/job-uid": "uid-kubectl"})
    elsewhere = meta("job-other-3-aaaaa", namespace="someone-else")
    touched = touched_workloads(
        {
            "KueueWorkload": [
                ev(kubectl),
                ev(elsewhere),
                ev(meta("job-gone-1"), "DELETED"),
                ev(meta("job-train-50-8f2c1", **{"kueue.x-k8s.io/job-uid": "uid-50"})),
            ]
        },
        LIVE,
    )
    assert touched.unknown == [kubectl, elsewhere]
    assert touched.ids == {50}


def finished(obj, reason="Succeeded", at="2026-12-07T05:00:00Z"):
    condition = {"type": "Finished", "status": "True", "reason": reason, "message": "Job done",
                 "lastTransitionTime": at}  # fmt: skip
    return {**obj, "status": {"conditions": [condition]}}


def test_kueues_workloads_seen_finished_are_kept_by_namespace():
    """A Job deleted as it finished (ttlSecondsAfterFinished: 0) leaves only this: its Kueue
    Workload's last look, in the watch (its DELETED event too carries it)."""
    ours = finished(meta("job-train-50-8f2c1", **{"kueue.x-k8s.io/job-uid": "uid-50"}))
    theirs = finished(meta("job-x-1-abc", namespace="team-b", **{"kueue.x-k8s.io/job-uid": "x"}))
    running = meta("job-eval-9-abc", namespace="team-b", **{"kueue.x-k8s.io/job-uid": "uid-9"})
    touched = touched_workloads(
        {"KueueWorkload": [ev(ours), ev(ours, "DELETED"), ev(theirs), ev(running)]}, LIVE
    )
    # by namespace, ours and others' (work followed in this very run has no row yet)
    assert dict(touched.ended) == {"team-a": [ours, ours], "team-b": [theirs]}
    assert touched.ids == {50, 9}


def test_a_members_job_maps_by_its_uid_and_its_last_look_is_kept_once_it_ended():
    """Jobs are watched whole: a followed member's Job (no label of ours) by its uid; deleted
    once complete (ttlSecondsAfterFinished), its last look is how it ended."""
    done = {"type": "Complete", "status": "True"}
    job = {**meta("eval-9", namespace="team-b"), "kind": "Job", "status": {"conditions": [done]}}
    job["metadata"]["uid"] = "uid-9"
    other = {**meta("x", namespace="team-b"), "kind": "Job", "status": {"conditions": [done]}}
    running = {**meta("r", namespace="team-b"), "kind": "Job"}
    touched = touched_workloads(
        {"Job": [ev(job), ev(job, "DELETED"), ev(other, "DELETED"), ev(running, "DELETED")]},
        LIVE,
    )
    assert touched.ids == {9}
    assert dict(touched.ended) == {"team-b": [job, other]}  # not one deleted while running


def test_a_members_pod_maps_to_the_followed_work_it_belongs_to():
    """Pods are watched whole: a followed member's Job's pod (no label of ours) by its owner,
    so the row says it runs as soon as the portal's own would; others' pods touch nothing."""
    pod = meta("eval-9-x7k2p", namespace="team-b")
    pod["metadata"]["ownerReferences"] = [
        {"kind": "Job", "name": "eval-9", "uid": "uid-9", "controller": True}
    ]
    stranger = meta("web-1", namespace="team-b")
    stranger["metadata"]["ownerReferences"] = [
        {"kind": "Job", "name": "web", "uid": "u-web", "controller": True}
    ]
    touched = touched_workloads({"Pod": [ev(pod), ev(stranger)]}, LIVE)
    assert touched.ids == {9}
    assert touched_workloads({"Pod": [ev(meta("eval-9", namespace="team-a"))]}, LIVE).ids == set()


def test_a_change_in_a_queue_with_none_of_ours_in_it_only_marks_the_queue():
    touched = touched_workloads({"KueueWorkload": [ev(meta("job-x-1-abc"), "DELETED")]}, LIVE)
    assert (touched.ids, touched.queue_namespaces) == (set(), {"team-a"})


def test_events_map_by_the_object_they_involve_and_only_those_the_sync_reads():
    touched = touched_workloads(
        {
            "Event": [
                ev(event("Preempted", "train-5-abcde"), "ADDED"),  # the job's pod
                ev(event("FailedCreate", "serve-7-6b9f4d7c5", kind="ReplicaSet")),
                ev(event("Preempted", "job-eval-9-1f2e3", "team-b", "Workload")),
                ev(event("Scheduled", "train-50-zzzzz")),  # not a reason observe reads
                ev(event("Preempted", "train-50-zzzzz"), "DELETED"),  # an event expiring
                ev(event("Preempted", "train-5-abcde", "team-b")),  # no train-5 there
            ]
        },
        LIVE,
    )
    assert touched.ids == {5, 7, 9}
    assert touched.queue_namespaces == set()


def test_a_name_prefix_does_not_confuse_train_5_with_train_50():
    touched = touched_workloads({"Event": [ev(event("Preempted", "train-50-pod12"))]}, LIVE)
    assert touched.ids == {50}


def test_no_changes_touch_nothing():
    assert touched_workloads({"Job": [], "Pod": [], "Event": []}, LIVE) == watching.Touched()


def queue_workload(name, uid, created, priority=0, reserved=False):
    conditions = [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "labels": {"kueue.x-k8s.io/job-uid": uid},
        },
        "spec": {"priority": priority},
        "status": {"conditions": conditions},
    }


@pytest.mark.django_db
def test_queued_workloads_get_their_new_places_from_the_queue_without_a_get(world):
    on_cluster = {"state": "queued", "namespace": "ns-q", "cluster_created_at": timezone.now()}
    first = WorkloadFactory(k8s_uid="u1", queue_position=2, **on_cluster)
    second = WorkloadFactory(k8s_uid="u2", queue_position=3, **on_cluster)
    queue = [
        queue_workload("job-a", "u0", "2026-01-01T00:00:00Z", reserved=True),  # admitted now
        queue_workload("job-b", "u1", "2026-01-01T00:01:00Z"),
        queue_workload("job-c", "u2", "2026-01-01T00:02:00Z"),
    ]
    reading = NamespaceReading(pods={}, events=[], queue_workloads=queue)
    watching.refresh_queue_positions(object(), ["ns-q"], {"ns-q": reading}, synced=set())
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.queue_position, second.queue_position) == (1, 2)


@pytest.mark.django_db(transaction=True)
def test_a_sync_that_finds_another_one_running_skips(world):
    """Two runs at once would both move the cursors: the second one does nothing at all (it
    does not even touch the cluster: the gateway here is a bare object)."""
    held, release = threading.Event(), threading.Event()

    def other_run():
        with advisory_lock(*watching.SYNC_LOCK) as acquired:
            assert acquired
            held.set()
            release.wait(10)
        connection.close()

    thread = threading.Thread(target=other_run)
    thread.start()
    try:
        assert held.wait(10)
        assert watching.sync_live_workloads(object()) == 0
        assert not WorkloadSyncState.objects.exists()
    finally:
        release.set()
        thread.join(10)
    assert Workload.objects.count() == 0


@pytest.mark.django_db
def test_a_job_gone_as_it_finished_ends_as_its_kueue_workload_said(world):
    """Its object gone and nothing of it left to list, a Job whose Kueue Workload a watch saw
    finish is recorded as that: succeeded (or failed), not failed as deleted; with no such look,
    deleted as before."""
    made = timezone.now() - timedelta(hours=1)
    on_cluster = {"state": "running", "namespace": "ns-t", "cluster_created_at": made}
    ttl, gone = (WorkloadFactory(k8s_uid=u, k8s_name=u, **on_cluster) for u in ("u-ttl", "u-gone"))
    done_at = timezone.now()  # after the rows were made: within their lives
    labels = {"kueue.x-k8s.io/job-uid": "u-ttl"}
    last_look = finished(
        {"metadata": {"name": "job-u-ttl-x", "namespace": "ns-t", "labels": labels}},
        at=done_at.isoformat(),
    )
    reading = NamespaceReading(pods={}, events=[], queue_workloads=[], objects={"Job": {}})
    job_look = {
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns-t", "uid": "u-job"},
        "status": {"conditions": [{"type": "Complete", "status": "True", "message": "done"}]},
    }
    by_job = WorkloadFactory(k8s_uid="u-job", k8s_name="j", **on_cluster)
    for w in (ttl, gone, by_job):
        sync.sync_workload(object(), w.pk, reading, ended=[last_look, job_look])
        w.refresh_from_db()
    assert (by_job.state, by_job.reason) == ("succeeded", "Completed")  # its Job's last look
    assert (ttl.state, ttl.reason, ttl.message) == ("succeeded", "Completed", "Job done")
    assert ttl.finished_at == done_at  # when Kueue said, not when the portal looked
    assert (gone.state, gone.reason) == ("failed", "Deleted")


@pytest.mark.django_db
def test_a_full_read_leaves_a_job_gone_without_a_word_to_the_next_run(world):
    """No watch in a full read: the gone Job's sync fails as a cluster error (retried by the
    next run, whose watch began before the read), the row unchanged."""
    made = timezone.now() - timedelta(hours=1)
    gone = WorkloadFactory(
        state="running", namespace="ns-t", k8s_name="g", k8s_uid="g", cluster_created_at=made
    )
    reading = NamespaceReading(pods={}, events=[], queue_workloads=[], objects={"Job": {}})
    _, failed = side_by_side.sync_each(
        object(), [(gone.pk, "ns-t")], {"ns-t": reading}, defer_gone=True
    )
    gone.refresh_from_db()
    assert (failed, gone.state) == ([gone.pk], "running")
