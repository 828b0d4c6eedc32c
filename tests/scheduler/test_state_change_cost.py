"""What one change of state costs PostgreSQL (issue 55: the sync's tail at 200 teams was its
round trips): it locks the workload's row alone, not its team's (a submission locks that);
it asks the history's last time only for a time taken from the cluster; and what a sync saw
is recorded under one lock, a preemption and its requeue included."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduler.workloads.kinds.manifests import Observation
from scheduler.workloads.lifecycle.sync import change_state, record_observed
from scheduler.workloads.models import Workload, WorkloadEvent
from tenants.models import AuditEvent, Tenant
from tests.scheduler.factories import WorkloadFactory
from tests.tenants.factories import TenantFactory

T0 = datetime(2026, 11, 18, 12, 0, tzinfo=UTC)


def statements(queries) -> list[str]:
    """The statements a change sent, less the test's own savepoints."""
    return [q["sql"].split()[0] for q in queries if "SAVEPOINT" not in q["sql"]]


@pytest.mark.django_db
def test_a_change_timed_by_the_portal_is_one_lock_one_update_and_two_inserts(world):
    w = WorkloadFactory(tenant=world.tenant, submitted_by=world.member, state="pending")
    with CaptureQueriesContext(connection) as seen:
        change_state(w.pk, Observation("queued", "Pending", "waiting for quota"))
    assert statements(seen.captured_queries) == ["SELECT", "UPDATE", "INSERT", "INSERT"]
    assert "FOR UPDATE OF" in seen.captured_queries[1]["sql"]  # its own row, not its team's
    assert not any("MAX(" in q["sql"] for q in seen.captured_queries)
    assert list(w.events.values_list("state", flat=True)) == ["queued"]


@pytest.mark.django_db
def test_a_time_from_the_cluster_never_falls_before_the_last_event(world):
    w = WorkloadFactory(tenant=world.tenant, submitted_by=world.member, state="running")
    Workload.objects.filter(pk=w.pk).update(created_at=T0, started_at=T0)
    WorkloadEvent.objects.create(workload=w, created_at=T0 + timedelta(seconds=50), state="")
    with time_machine.travel(T0 + timedelta(minutes=1), tick=False):
        change_state(
            w.pk,
            Observation("succeeded", "Completed", finished_at=T0 + timedelta(seconds=40)),
        )
    w.refresh_from_db()
    assert w.finished_at == T0 + timedelta(seconds=40)  # the row keeps the cluster's time
    done = w.events.get(state="succeeded")
    assert done.created_at == T0 + timedelta(seconds=50)  # the history keeps its order


@pytest.mark.django_db
def test_a_preemption_and_its_requeue_are_recorded_under_one_lock(world):
    w = WorkloadFactory(tenant=world.tenant, submitted_by=world.member, state="running")
    with CaptureQueriesContext(connection) as seen:
        row = record_observed(w.pk, Observation("queued", "Preempted", "for team-b"), position=3)
    assert sum("FOR UPDATE" in q["sql"] for q in seen.captured_queries) == 1
    assert (row.state, row.queue_position) == ("queued", 3)
    assert list(w.events.values_list("state", flat=True)) == ["preempted", "queued"]
    verbs = AuditEvent.objects.filter(object_id=str(w.pk)).values_list("verb", flat=True)
    assert sorted(verbs) == ["workload.preempted", "workload.queued"]


@pytest.mark.django_db
def test_a_workload_given_back_for_idleness_stays_so_until_it_ends(world):
    w = WorkloadFactory(tenant=world.tenant, submitted_by=world.member, state="suspended")
    assert record_observed(w.pk, Observation("queued", "Pending"), position=1).state == "suspended"
    assert not w.events.exists()
    ended = record_observed(w.pk, Observation("failed", "Deleted", "gone"), position=None)
    assert ended.state == "failed" and ended.queue_position is None


@pytest.mark.django_db(transaction=True)  # two connections: the lock must be committed to be seen
def test_a_change_of_state_waits_for_no_lock_on_its_team():
    tenant = TenantFactory(slug="team-locked")
    w = WorkloadFactory(tenant=tenant, state="pending")
    held, release = threading.Event(), threading.Event()

    def hold_the_team():  # as a submission does while it checks the team's quota
        try:
            with transaction.atomic():
                Tenant.objects.select_for_update().get(pk=tenant.pk)
                held.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_team)
    holder.start()
    try:
        assert held.wait(10)
        with transaction.atomic():
            with connection.cursor() as cursor:  # waiting on the team's row fails, not hangs
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            changed = change_state(w.pk, Observation("queued", "Pending"))
        assert changed is not None and changed.state == "queued"
    finally:
        release.set()
        holder.join(10)
