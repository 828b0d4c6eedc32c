"""Run times from the cluster's clock, not the sync's (issue 35, 6): a job done between two
looks still started (run time, cost, a Running line in its history), a 60 s job reads 1 min,
and the live page's poll brings the history along."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import Client

from scheduler.workloads.kinds.manifests import Observation, observe
from scheduler.workloads.lifecycle.sync import change_state
from scheduler.workloads.models import Workload
from tests.scheduler.factories import WorkloadFactory

T0 = datetime(2026, 11, 18, 12, 0, tzinfo=UTC)


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def container_pod(started: datetime, finished: datetime | None = None, phase="Succeeded") -> dict:
    state = (
        {"terminated": {"exitCode": 0, "startedAt": stamp(started), "finishedAt": stamp(finished)}}
        if finished
        else {"running": {"startedAt": stamp(started)}}
    )
    return {
        "metadata": {"name": "p"},
        "status": {
            "phase": phase if finished else "Running",
            "startTime": stamp(started - timedelta(seconds=20)),  # before the image was pulled
            "containerStatuses": [{"name": "main", "state": state}],
        },
    }


def complete_job(at: datetime) -> dict:
    condition = {"type": "Complete", "status": "True", "lastTransitionTime": stamp(at)}
    return {"spec": {}, "status": {"conditions": [condition], "completionTime": stamp(at)}}


def test_a_finished_job_is_observed_with_its_containers_start_and_end():
    start, end = T0 + timedelta(seconds=30), T0 + timedelta(seconds=35)
    seen = observe("job", complete_job(end + timedelta(seconds=1)), [container_pod(start, end)], [])
    assert (seen.state, seen.started_at, seen.finished_at) == ("succeeded", start, end)
    running = observe("job", {"spec": {}, "status": {}}, [container_pod(start)], [])
    assert (running.state, running.started_at, running.finished_at) == ("running", start, None)


def test_without_container_times_the_pods_or_the_jobs_own_times_are_used():
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Succeeded", "startTime": stamp(T0)}}
    end = T0 + timedelta(seconds=9)
    seen = observe("job", complete_job(end), [pod], [])
    assert (seen.started_at, seen.finished_at) == (T0, end)
    # nothing said at all: no times, the portal's clock decides
    assert observe("job", {"spec": {}, "status": {}}, [], []).started_at is None


@pytest.mark.django_db
def test_a_job_done_between_two_looks_shows_its_run_time_cost_and_a_running_line(world):
    w = WorkloadFactory(
        tenant=world.tenant, submitted_by=world.member, resources={world.rc.slug: 2}
    )
    Workload.objects.filter(pk=w.pk).update(created_at=T0)
    start, end = T0 + timedelta(seconds=10), T0 + timedelta(seconds=15)
    with time_machine.travel(T0 + timedelta(seconds=40), tick=False):
        obs = observe("job", complete_job(end), [container_pod(start, end)], [])
        change_state(w.pk, obs)
    w.refresh_from_db()
    assert (w.state, w.started_at, w.finished_at) == ("succeeded", start, end)
    history = [(e.state, e.created_at) for e in w.events.all()]
    assert history[-2:] == [("running", start), ("succeeded", end)]
    client = Client()
    client.force_login(world.member)
    html = client.get(f"/workloads/{w.pk}/").content.decode()
    assert "not started" not in html
    assert "<dt>Run time</dt><dd>5 s</dd>" in html
    # its pods were never seen holding GPUs (no metering here): billed nothing, said as a cost
    # all the same, with what it was admitted with beside it
    assert 'id="workload-cost">0.00 USD' in html
    assert f"2 × {world.rc.display_name}" in html


@pytest.mark.django_db
def test_a_60_s_job_reads_1_min_whenever_the_sync_looks(world):
    w = WorkloadFactory(tenant=world.tenant, submitted_by=world.member)
    Workload.objects.filter(pk=w.pk).update(created_at=T0)
    start, end = T0 + timedelta(seconds=5), T0 + timedelta(seconds=65)
    with time_machine.travel(start + timedelta(seconds=28), tick=False):  # seen late, running
        change_state(w.pk, observe("job", {"spec": {}, "status": {}}, [container_pod(start)], []))
    with time_machine.travel(end + timedelta(seconds=29), tick=False):  # seen late, done
        change_state(w.pk, observe("job", complete_job(end), [container_pod(start, end)], []))
    w.refresh_from_db()
    assert w.finished_at - w.started_at == timedelta(seconds=60)
    client = Client()
    client.force_login(world.member)
    assert (
        "<dt>Run time</dt><dd>1 min 00 s</dd>" in client.get(f"/workloads/{w.pk}/").content.decode()
    )


@pytest.mark.django_db
def test_times_from_another_clock_stay_between_the_submission_and_now(world):
    w = WorkloadFactory(tenant=world.tenant, submitted_by=world.member)
    Workload.objects.filter(pk=w.pk).update(created_at=T0)
    with time_machine.travel(T0 + timedelta(minutes=1), tick=False):
        change_state(
            w.pk,
            Observation(
                "succeeded",
                "Completed",
                started_at=T0 - timedelta(hours=1),  # a node's clock behind
                finished_at=T0 + timedelta(hours=1),  # and one ahead
            ),
        )
    w.refresh_from_db()
    assert (w.started_at, w.finished_at) == (T0, T0 + timedelta(minutes=1))


@pytest.mark.django_db
def test_the_live_pages_poll_brings_every_state_change_to_the_history(world):
    w = WorkloadFactory(tenant=world.tenant, submitted_by=world.member, state="pending")
    client = Client()
    client.force_login(world.member)
    page = client.get(f"/workloads/{w.pk}/").content.decode()
    assert 'id="workload-history"' in page and "hx-swap-oob" not in page
    change_state(w.pk, Observation("running", "Running"))
    change_state(w.pk, Observation("succeeded", "Completed"))
    poll = client.get(f"/workloads/{w.pk}/state/").content.decode()
    assert 'id="workload-history" aria-labelledby="history-h" hx-swap-oob="true"' in poll
    history = poll.split('id="workload-history"')[1]
    assert "Running" in history and "Succeeded" in history
    assert 'id="state-badge">Succeeded<' in poll
