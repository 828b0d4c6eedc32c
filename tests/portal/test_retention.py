"""Retention: the settings' checks (pure), the audit chain sealed and verified, and the purge
(real PostgreSQL): what is past its period goes, in batches, what is within it stays, twice is
harmless, and the audit chain still verifies after its oldest rows are cut."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import transaction

from metering.models import AllocationInterval
from portal.celery import app
from portal.retention import check_retention_days, purge_expired
from portal.system_checks import retention_periods
from scheduler.health.models import HealthEvent
from scheduler.workloads.models import WorkloadEvent
from tenants import audit_chain
from tenants.models import AuditEvent, NotificationDelivery
from tests.scheduler.factories import ClusterFactory, WorkloadFactory
from tests.tenants.factories import TenantFactory

NOW = datetime(2030, 6, 1, 12, tzinfo=UTC)
GOOD = {
    "audit": 30,
    "workload_events": 10,
    "notification_deliveries": 10,
    "health_events": 10,
    "allocation_intervals": 10,
}


# --- settings (pure) -------------------------------------------------------------------------


def test_valid_periods_are_returned_with_the_samples_period():
    assert check_retention_days(GOOD, 35) == {**GOOD, "usage_samples": 35}


@pytest.mark.parametrize("bad", [0, -1, "30", 1.5, None, True])
def test_a_period_not_a_whole_number_of_days_above_zero_names_its_setting(bad):
    with pytest.raises(ImproperlyConfigured, match="RETENTION_WORKLOAD_EVENTS_DAYS must be"):
        check_retention_days({**GOOD, "workload_events": bad}, 35)


def test_a_missing_kind_and_bad_samples_period_are_refused_too():
    with pytest.raises(ImproperlyConfigured, match="RETENTION_AUDIT_DAYS"):
        check_retention_days({k: v for k, v in GOOD.items() if k != "audit"}, 35)
    with pytest.raises(ImproperlyConfigured, match="RAW_SAMPLE_RETENTION_DAYS"):
        check_retention_days(GOOD, 0)
    with pytest.raises(ImproperlyConfigured, match="unknown kinds: sessions"):
        check_retention_days({**GOOD, "sessions": 3}, 35)


def test_the_system_check_reports_a_bad_period(settings):
    settings.RETENTION_DAYS = GOOD
    assert retention_periods(None) == []
    settings.RETENTION_DAYS = {**GOOD, "audit": -5}
    [error] = retention_periods(None)
    assert error.id == "portal.E001" and "RETENTION_AUDIT_DAYS" in error.msg


def test_a_bad_period_stops_the_purge(settings, db):
    settings.RETENTION_DAYS = {**GOOD, "health_events": 0}
    with pytest.raises(ImproperlyConfigured, match="RETENTION_HEALTH_EVENTS_DAYS"):
        purge_expired(now=NOW)


# --- the audit chain --------------------------------------------------------------------------


@pytest.fixture
def chain(db):
    def add(n, at, verb="test.happened"):
        AuditEvent.objects.bulk_create(
            AuditEvent(
                created_at=at,
                actor_repr="system",
                verb=verb,
                object_type="test",
                after={"i": i, "at": at.isoformat()},
            )
            for i in range(n)
        )

    return add


def test_sealing_chains_every_row_once_and_verification_passes(chain):
    chain(5, NOW)
    assert audit_chain.seal_pending() == 5
    assert audit_chain.seal_pending() == 0
    chain(2, NOW)
    assert audit_chain.seal_pending() == 2
    result = audit_chain.verify()
    assert result.ok, result.problems
    assert (result.checked, result.first_seq, result.unsealed) == (7, 1, 0)
    assert sorted(AuditEvent.objects.values_list("chain_seq", flat=True)) == list(range(1, 8))


def test_verification_finds_content_changed_and_rows_missing(chain):
    chain(4, NOW)
    audit_chain.seal_pending()
    second, third = AuditEvent.objects.order_by("chain_seq")[1:3]
    with transaction.atomic():  # what a forged erasure could do: content changed, salt kept
        audit_chain.allow("erasure")
        AuditEvent.objects.filter(pk=second.pk).update(actor_repr="mallory")
    with transaction.atomic():
        audit_chain.allow("purge")
        AuditEvent.objects.filter(pk=third.pk).delete()
    problems = audit_chain.verify().problems
    assert f"event {second.pk} (place 2): content changed" in problems
    assert "places 3..3 are missing" in problems


def test_an_ordinary_update_or_delete_is_still_refused(chain):
    chain(1, NOW)
    audit_chain.seal_pending()
    event = AuditEvent.objects.get()
    with pytest.raises(Exception, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(chain_digest="0" * 64)
    with pytest.raises(Exception, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).delete()


# --- the purge --------------------------------------------------------------------------------


@pytest.fixture
def periods(settings):
    settings.RETENTION_DAYS = GOOD
    settings.RETENTION_PURGE_BATCH = 2  # several batches in every kind


def _world():
    """For each kind, three rows past its period and one inside it (and what must stay)."""
    old, recent = NOW - timedelta(days=40), NOW - timedelta(days=1)
    workload = WorkloadFactory(tenant=TenantFactory())
    cluster = ClusterFactory()
    for i, at in enumerate((old, old, old, recent)):
        WorkloadEvent.objects.create(workload=workload, created_at=at, reason="r")
        NotificationDelivery.objects.create(
            event="e", subject="s", text="t", created_at=at, state=NotificationDelivery.State.SENT
        )
        HealthEvent.objects.create(
            cluster=cluster, node_name="n", signal="xid", action="warn", description="d",
            opened_at=at, closed_at=at,
        )  # fmt: skip
        AllocationInterval.objects.create(
            cluster=cluster, pod_uid=f"u-{i}", namespace="ns", pod_name="p", node_name="n",
            resource_name="nvidia.com/gpu", units=1, started_at=at, last_seen_at=at, ended_at=at,
        )  # fmt: skip
    # still pending, or still open: kept whatever their age
    NotificationDelivery.objects.create(event="e", subject="s", text="t", created_at=old)
    HealthEvent.objects.create(
        cluster=cluster, node_name="n", signal="xid", action="warn", description="d", opened_at=old
    )
    AllocationInterval.objects.create(
        cluster=cluster, pod_uid="open", namespace="ns", pod_name="p", node_name="n",
        resource_name="nvidia.com/gpu", units=1, started_at=old, last_seen_at=old,
    )  # fmt: skip


def test_the_purge_deletes_what_is_past_its_period_and_keeps_the_rest(db, periods, chain):
    _world()
    chain(5, NOW - timedelta(days=45))  # past the audit's 30 days
    chain(3, NOW - timedelta(days=2))
    audit_chain.seal_pending()

    with time_machine.travel(NOW, tick=False):  # what the purge records is stamped now
        purged = purge_expired(now=NOW)

    assert purged == {
        "audit": 5,
        "workload_events": 3,
        "notification_deliveries": 3,
        "health_events": 3,
        "allocation_intervals": 3,
    }
    assert WorkloadEvent.objects.count() == 1
    assert NotificationDelivery.objects.count() == 2  # the recent one, the pending one
    assert HealthEvent.objects.count() == 2  # the recent one, the open one
    assert AllocationInterval.objects.count() == 2
    kept = AuditEvent.objects.filter(verb="test.happened")
    assert kept.count() == 3 and all(e.created_at > NOW - timedelta(days=30) for e in kept)
    # each kind's purge is audited; the audit's cuts hold where its chain starts again
    recorded = AuditEvent.objects.filter(verb="retention.purged").values_list("after", flat=True)
    assert sorted((a["kind"], a["deleted"]) for a in recorded) == [
        ("allocation_intervals", 3),
        ("health_events", 3),
        ("notification_deliveries", 3),
        ("workload_events", 3),
    ]
    cuts = AuditEvent.objects.filter(verb="audit.purged").order_by("id")
    assert [c.after["through_seq"] for c in cuts] == [2, 4, 5]  # batches of 2
    audit_chain.seal_pending()
    result = audit_chain.verify()
    assert result.ok, result.problems
    assert result.first_seq == 6

    # twice is harmless: nothing more goes, nothing more is recorded, the chain still verifies
    events = AuditEvent.objects.count()
    with time_machine.travel(NOW, tick=False):
        assert set(purge_expired(now=NOW).values()) == {0}
    assert AuditEvent.objects.count() == events
    audit_chain.seal_pending()
    assert audit_chain.verify().ok

    # later, the first cuts fall past the period too: the chain starts again at the newest cut
    later = NOW + timedelta(days=40)
    chain(1, later)
    with time_machine.travel(later, tick=False):
        assert purge_expired(now=later)["audit"] >= 3
    audit_chain.seal_pending()
    result = audit_chain.verify()
    assert result.ok, result.problems


def test_the_purge_never_cuts_the_chain_head(db, periods, chain):
    chain(3, NOW - timedelta(days=400))
    audit_chain.seal_pending()
    with time_machine.travel(NOW, tick=False):
        assert purge_expired(now=NOW)["audit"] == 2
    audit_chain.seal_pending()
    assert audit_chain.verify().ok
    assert AuditEvent.objects.filter(verb="test.happened").get().chain_seq == 3


def test_verify_audit_command(db, chain, capsys):
    chain(2, NOW)
    call_command("verify_audit", "--seal")
    assert "the audit chain verifies: 2 events from place 1, 0 not sealed yet" in (
        capsys.readouterr().out
    )


def test_the_purge_and_the_seal_run_on_beat(settings):
    app.loader.import_default_modules()
    for name, task in (
        ("purge-expired-records", "portal.tasks.purge_expired_records"),
        ("seal-audit-log", "tenants.tasks.seal_audit_log"),
    ):
        entry = settings.CELERY_BEAT_SCHEDULE[name]
        assert entry["task"] == task and task in app.tasks and entry["options"]["expires"]


def test_a_row_erased_by_an_erasure_older_than_itself_is_found(chain):
    """Security, third pass (7): `verify` took any row with an empty salt that named any
    erasure; an erasure clears only what came before it."""
    chain(2, NOW)
    chain(1, NOW, verb=audit_chain.ERASED_VERB)
    chain(1, NOW)
    audit_chain.seal_pending()
    first, erasure, later = (
        AuditEvent.objects.order_by("chain_seq")[0],
        AuditEvent.objects.get(verb=audit_chain.ERASED_VERB),
        AuditEvent.objects.order_by("-chain_seq")[0],
    )
    with transaction.atomic():  # what erasure does to a row before it: fine
        audit_chain.allow("erasure")
        AuditEvent.objects.filter(pk=first.pk).update(content_salt="", erased_by=erasure.pk)
    assert audit_chain.verify().problems == []
    with transaction.atomic():  # and to a row after it: a forgery
        audit_chain.allow("erasure")
        AuditEvent.objects.filter(pk=later.pk).update(
            actor_repr="mallory", content_salt="", erased_by=erasure.pk
        )
    problems = audit_chain.verify().problems
    assert problems == [
        f"event {later.pk} (place 4): erased by event {erasure.pk}, which came before it"
    ]
