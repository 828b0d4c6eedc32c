"""Booking ahead on PostgreSQL (issue 52): every limit holds at every instant of a grant's
window, a refusal names the earliest window that fits, bad windows are 400s that store
nothing, and an open-ended grant that blocks a booking is named and can be given an end."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from core.errors import CapacityExceeded, Forbidden, InvalidInput, QuotaExceeded
from tenants.models import AuditEvent, AutoApprovalRule, CapacityRequest, QuotaGrant
from tenants.selectors import pool_summary
from tenants.services import approvals as approval_services
from tenants.services import capacity as capacity_services
from tenants.services import grants as grant_services
from tenants.services import renewals as renewal_services
from tenants.services import requests as request_services
from tests.tenants.factories import QuotaGrantFactory
from tests.tenants.test_services import Snapshot

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(NOW, tick=False):
        yield


def book(world, tenant, amount, start_day, end_day, actor=None):
    """Ask for `amount` units from day `start_day` to `end_day` (from NOW) and approve it."""
    request = request_services.submit_capacity_request(
        actor=actor or world.admin,
        tenant=tenant,
        items={world.rc.slug: amount},
        starts_at=NOW + start_day * DAY if start_day else None,
        ends_at=NOW + end_day * DAY,
        justification="the run",
    )
    return approval_services.approve_capacity_request(actor=world.admin, request=request)


def test_a_booking_and_a_grant_before_it_share_the_same_units(world):
    book(world, world.tenant, 10, 3, 5)  # every unit, days 3 to 5
    book(world, world.other_tenant, 10, 0, 2)  # the same units, days 0 to 2
    grants = QuotaGrant.objects.filter(resource_class=world.rc).order_by("starts_at")
    assert [(g.starts_at, g.ends_at) for g in grants] == [
        (NOW, NOW + 2 * DAY),
        (NOW + 3 * DAY, NOW + 5 * DAY),
    ]
    # the booked grant is not in force yet: the cluster renders only grants in force
    assert not QuotaGrant.objects.effective(NOW).filter(tenant=world.tenant).exists()
    assert QuotaGrant.objects.effective(NOW + 3 * DAY).filter(tenant=world.tenant).exists()


def test_an_ask_overlapping_a_booking_is_refused_with_the_earliest_window_that_fits(world):
    book(world, world.tenant, 10, 3, 5)
    book(world, world.other_tenant, 10, 0, 2)
    before = Snapshot()
    with pytest.raises(CapacityExceeded) as refused:
        request_services.submit_capacity_request(
            actor=world.member,
            tenant=world.tenant,
            items={world.rc.slug: 2},
            starts_at=NOW + 2 * DAY,
            ends_at=NOW + 4 * DAY,
            justification="more",
        )
    detail = refused.value.detail
    assert "asked for 2 but only 0 of 10 can still be granted at every instant" in detail
    assert "from 2026-12-09 09:00 UTC until 2026-12-11 09:00 UTC" in detail
    assert (
        "the earliest window of the same length that fits is "
        "from 2026-12-12 09:00 UTC until 2026-12-14 09:00 UTC" in detail
    )
    assert refused.value.status == 409
    assert before.unchanged()


def test_the_preview_shows_the_free_units_of_the_asked_window(world):
    book(world, world.other_tenant, 7, 3, 5)
    _, free = request_services.preview_capacity_request(
        tenant=world.tenant, items={world.rc.slug: 1}, starts_at=NOW, ends_at=NOW + 2 * DAY
    )
    assert free == {world.rc.slug: 10}
    _, free = request_services.preview_capacity_request(
        tenant=world.tenant,
        items={world.rc.slug: 1},
        starts_at=NOW + 4 * DAY,
        ends_at=NOW + 6 * DAY,
    )
    assert free == {world.rc.slug: 3}


def test_grants_one_after_another_are_not_summed(world):
    """Today's sum-all check would have refused the third: 30 units of a pool of 10."""
    for start in (0, 3, 6):
        book(world, world.other_tenant, 10, start, start + 3)
    assert capacity_services.free_capacity(world.rc, NOW) == 0
    assert capacity_services.free_capacity(world.rc, NOW, capacity_services.Window(NOW + 9 * DAY))


@pytest.mark.parametrize(
    ("starts", "ends", "field", "says"),
    [
        (-DAY, 2 * DAY, "starts_at", "start must not be in the past: choose now or a later"),
        (3 * DAY, 2 * DAY, "ends_at", "end must be after the start: move the end later"),
        (DAY, 400 * DAY, "ends_at", "granted for at most 365 days at a time: choose an end on"),
        (366 * DAY, 367 * DAY, "starts_at", "booked at most 365 days ahead: choose a start on"),
    ],
)
def test_a_bad_window_is_a_400_that_says_what_to_change_and_stores_nothing(
    world, starts, ends, field, says
):
    before = Snapshot()
    with pytest.raises(InvalidInput, match=says) as refused:
        request_services.submit_capacity_request(
            actor=world.member,
            tenant=world.tenant,
            items={world.rc.slug: 1},
            starts_at=NOW + starts,
            ends_at=NOW + ends,
            justification="x",
        )
    assert refused.value.status == 400 and refused.value.field == field
    assert before.unchanged()


def test_an_open_ended_grant_that_blocks_a_booking_is_named_and_can_be_given_an_end(world):
    blocker = QuotaGrantFactory(
        tenant=world.other_tenant, resource_class=world.rc, amount=10, starts_at=NOW, ends_at=None
    )
    with pytest.raises(CapacityExceeded) as refused:
        book(world, world.tenant, 4, 30, 32)
    named = f"open-ended grants hold every instant from their start (grant #{blocker.pk}: 10 units)"
    assert "team-b" not in refused.value.detail  # the requester may be another team
    assert named in refused.value.detail
    assert "the platform team may give them an end" in refused.value.detail
    assert "earliest window" not in refused.value.detail  # none fits while it holds for ever

    grant_services.set_grant_end(
        actor=world.admin, grant=blocker, ends_at=NOW + 20 * DAY, comment="ends with the project"
    )
    event = AuditEvent.objects.get(verb="quota_grant.end_set")
    assert event.after["ends_at"] is not None and event.before["ends_at"] is None
    assert book(world, world.tenant, 4, 30, 32).state == CapacityRequest.State.APPROVED


def test_only_a_platform_admin_gives_a_grant_an_earlier_end_and_never_a_later_one(world):
    grant = QuotaGrantFactory(
        tenant=world.tenant, resource_class=world.rc, amount=1, starts_at=NOW, ends_at=NOW + DAY
    )
    with pytest.raises(InvalidInput, match="choose an earlier end, or extend the grant"):
        grant_services.set_grant_end(actor=world.admin, grant=grant, ends_at=NOW + 2 * DAY)
    with pytest.raises(InvalidInput, match="to end a grant now, revoke it"):
        grant_services.set_grant_end(actor=world.admin, grant=grant, ends_at=NOW - DAY)
    with pytest.raises(Forbidden):
        grant_services.set_grant_end(actor=world.owner, grant=grant, ends_at=NOW + DAY / 2)
    grant.refresh_from_db()
    assert grant.ends_at == NOW + DAY


def test_an_extension_is_checked_on_its_new_window(world):
    request = book(world, world.other_tenant, 10, 0, 2)
    grant = request.grants.get()
    book(world, world.tenant, 10, 3, 5)
    renewal = renewal_services.submit_grant_renewal(
        actor=world.outsider, grant=grant, ends_at=NOW + 4 * DAY
    )
    with pytest.raises(CapacityExceeded, match=f"the extension of grant #{grant.pk}") as refused:
        approval_services.approve_capacity_request(actor=world.admin, request=renewal)
    assert refused.value.field == "ends_at"
    grant.refresh_from_db()
    assert grant.ends_at == NOW + 2 * DAY
    # up to the booking's start it fits: nothing is held there but the grant itself
    renewal = renewal_services.submit_grant_renewal(
        actor=world.outsider, grant=grant, ends_at=NOW + 3 * DAY
    )
    approval_services.approve_capacity_request(actor=world.admin, request=renewal)
    grant.refresh_from_db()
    assert grant.ends_at == NOW + 3 * DAY


def test_the_ceiling_is_a_limit_at_every_instant(world):
    world.tenant.gpu_ceiling = Decimal("2")  # 4 units of 3/7 is 1.71 GPU-equivalents
    world.tenant.save()
    book(world, world.tenant, 4, 0, 2)
    assert book(world, world.tenant, 4, 2, 4).state == CapacityRequest.State.APPROVED
    with pytest.raises(QuotaExceeded, match="it holds 1.7144 at its busiest from 2026-12-10"):
        book(world, world.tenant, 1, 3, 5)


def test_the_envelope_bounds_what_is_held_at_every_instant(world):
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=4, max_duration_hours=72)

    def ask(start_day, end_day):
        return request_services.submit_capacity_request(
            actor=world.member,
            tenant=world.tenant,
            items={world.rc.slug: 4},
            starts_at=NOW + start_day * DAY if start_day else None,
            ends_at=NOW + end_day * DAY,
            justification="x",
        )

    assert ask(0, 2).state == CapacityRequest.State.APPROVED
    assert ask(2, 4).state == CapacityRequest.State.APPROVED  # one after the other: 4 at most
    overlapping = ask(3, 5)
    assert overlapping.state == CapacityRequest.State.SUBMITTED
    assert "the team holds 4 approved automatically already" in overlapping.policy_reasons[0]


def test_the_pool_summary_counts_bookings_where_they_overlap_not_summed(world):
    for start in (0, 3, 6):
        book(world, world.other_tenant, 6, start, start + 3)
    book(world, world.tenant, 3, 4, 5)
    [line] = [x for x in pool_summary() if x.resource_class == world.rc]
    assert (line.granted, line.free) == (9, 1)


def test_an_extension_meets_the_envelope_on_its_new_window(world):
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=4, max_duration_hours=96)

    def ask(start_day, end_day):
        return request_services.submit_capacity_request(
            actor=world.member,
            tenant=world.tenant,
            items={world.rc.slug: 4},
            starts_at=NOW + start_day * DAY if start_day else None,
            ends_at=NOW + end_day * DAY,
            justification="x",
        )

    grant = ask(0, 1).grants.get()
    assert ask(2, 3).state == CapacityRequest.State.APPROVED  # a later booking, same team
    alone = renewal_services.submit_grant_renewal(
        actor=world.member, grant=grant, ends_at=NOW + 2 * DAY
    )
    assert alone.state == CapacityRequest.State.APPROVED  # up to the booking: 4 at most
    grant.refresh_from_db()
    overlapping = renewal_services.submit_grant_renewal(
        actor=world.member, grant=grant, ends_at=NOW + 3 * DAY
    )
    assert overlapping.state == CapacityRequest.State.SUBMITTED
    assert "the team holds 4 approved automatically already" in overlapping.policy_reasons[0]
