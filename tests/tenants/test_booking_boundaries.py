"""The cluster follows a booking's window (issue 52), proved with the clock in hand: the
reconcile renders only grants in force, and the boundary pass beat runs every few seconds
hints a reconcile of the team within one period of its start and of its end, tells the team
once that its booking started, and warns it a day before its end. No cluster: what reaches
Kueue from here is `tests/scheduler/test_booking_cluster.py`'s (the lead runs it)."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.conf import settings

from tenants.models import AuditEvent, NotificationDelivery, QuotaGrant
from tenants.selectors import effective_quotas
from tenants.services import approvals as approval_services
from tenants.services import bookings
from tenants.services import grants as grant_services
from tenants.services import requests as request_services

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
START, END = NOW + timedelta(seconds=20), NOW + timedelta(days=3)
PERIOD = timedelta(seconds=settings.CELERY_BEAT_SCHEDULE["grant-boundaries"]["schedule"])


@pytest.fixture
def booking(world):
    with time_machine.travel(NOW - timedelta(hours=1), tick=False):
        request = request_services.submit_capacity_request(
            actor=world.admin,
            tenant=world.tenant,
            items={world.rc.slug: 4},
            starts_at=START,
            ends_at=END,
            justification="the run",
        )
        approval_services.approve_capacity_request(actor=world.admin, request=request)
    return QuotaGrant.objects.get(request=request)


@pytest.fixture
def hinted(monkeypatch):
    teams: list[str] = []
    monkeypatch.setattr(bookings, "notify_desired_state_changed", lambda t: teams.append(t.slug))
    return teams


def test_the_boundary_pass_runs_often_enough_for_a_minute():
    assert PERIOD <= timedelta(seconds=30)
    assert timedelta(seconds=settings.BOOKING_LOOKBACK_S) >= 3 * PERIOD


def test_a_booking_is_rendered_from_its_start_to_its_end_only(world, booking):
    for at, expected in [
        (START - timedelta(seconds=1), {}),
        (START, {world.rc.pk: 4}),
        (END - timedelta(seconds=1), {world.rc.pk: 4}),
        (END, {}),
    ]:
        with time_machine.travel(at, tick=False):
            assert effective_quotas([world.tenant.pk]).get(world.tenant.pk, {}) == expected, at


def test_the_team_is_reconciled_within_one_period_of_its_start_and_end(world, booking, hinted):
    with time_machine.travel(START - timedelta(seconds=1), tick=False):
        bookings.hint_boundaries()
    assert hinted == []
    with time_machine.travel(START + PERIOD, tick=False):  # the first pass after the start
        bookings.hint_boundaries()
    assert hinted == ["team-a"]
    with time_machine.travel(END + PERIOD, tick=False):
        bookings.hint_boundaries()
    assert hinted == ["team-a", "team-a"]


def test_a_pass_missed_while_the_workers_restarted_is_made_up(world, booking, hinted):
    with time_machine.travel(START + timedelta(seconds=settings.BOOKING_LOOKBACK_S - 1)):
        bookings.hint_boundaries()
    assert hinted == ["team-a"]


def test_the_team_is_told_once_that_its_booking_started(world, booking, hinted):
    with time_machine.travel(START - timedelta(seconds=1), tick=False):
        assert bookings.announce_started_bookings(now=START - timedelta(seconds=1)) == 0
    with time_machine.travel(START + PERIOD, tick=False):
        bookings.hint_boundaries()
        bookings.hint_boundaries()  # twice is harmless
    assert AuditEvent.objects.filter(verb="quota_grant.started").count() == 1
    assert NotificationDelivery.objects.filter(event="grant.started").exists()
    booking.refresh_from_db()
    assert booking.start_notified_at == START + PERIOD


def test_a_grant_made_to_start_at_once_is_no_booking(world, hinted):
    with time_machine.travel(NOW, tick=False):
        grant_services.grant_quota(
            actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=1
        )
        bookings.hint_boundaries()
    assert not AuditEvent.objects.filter(verb="quota_grant.started").exists()


def test_a_booking_is_warned_a_day_before_its_end_not_three(world, booking, hinted):
    with time_machine.travel(START + PERIOD, tick=False):
        bookings.hint_boundaries()  # started
    with time_machine.travel(END - timedelta(hours=48), tick=False):
        assert grant_services.warn_expiring_grants() == 0  # the hourly 72 h warning skips it
        bookings.hint_boundaries()
    assert not AuditEvent.objects.filter(verb="quota_grant.expiry_warned").exists()
    with time_machine.travel(END - timedelta(hours=23), tick=False):
        bookings.hint_boundaries()
    assert AuditEvent.objects.filter(verb="quota_grant.expiry_warned").count() == 1
