"""Renewals: "extend this grant" carries the grant it extends; inside the envelope it is
approved at once, otherwise queued; approval moves the same grant's end (no gap, nothing
counted twice); concurrent approvals never overcommit."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from catalog import services as catalog_services
from core.errors import Forbidden, InvalidInput, InvalidTransition, NotFound, QuotaExceeded
from tenants.models import AuditEvent, AutoApprovalRule, CapacityRequest, QuotaGrant
from tenants.notifications import deliver_due
from tenants.selectors import auto_approved_units
from tenants.services import approvals as approval_services
from tenants.services import capacity as capacity_services
from tenants.services import grants as grant_services
from tenants.services import renewals as renewal_services
from tenants.services import requests as request_services
from tenants.services import tenants as tenant_services
from tenants.services import tokens as token_services
from tests.portal.api.conftest import bearer
from tests.race import race, wait_until_another_waits_for_a_lock
from tests.tenants.factories import (
    CapacityRequestFactory,
    CapacityRequestItemFactory,
    PlatformAdminFactory,
    PoolFactory,
    QuotaGrantFactory,
    ResourceClassFactory,
    TenantFactory,
)


def _grant(world, *, amount=2, days=2):
    now = timezone.now()
    return QuotaGrantFactory(
        tenant=world.tenant,
        resource_class=world.rc,
        amount=amount,
        starts_at=now - timedelta(days=1),
        ends_at=now + timedelta(days=days),
    )


def _holding(rc):
    return sum(
        QuotaGrant.objects.holding().filter(resource_class=rc).values_list("amount", flat=True)
    )


@pytest.mark.django_db
def test_inside_the_envelope_a_renewal_extends_the_same_grant_at_once(world):
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=4, max_duration_hours=72)
    grant = _grant(world)
    old_end = grant.ends_at
    QuotaGrant.objects.filter(pk=grant.pk).update(expiry_warned_at=timezone.now())
    free_before = capacity_services.free_capacity(world.rc)

    renewal = renewal_services.submit_grant_renewal(
        actor=world.member, grant=grant, ends_at=old_end + timedelta(hours=48)
    )

    assert renewal.auto_approved and renewal.state == CapacityRequest.State.APPROVED
    assert renewal.extends_id == grant.pk and renewal.starts_at == old_end  # no gap
    grant.refresh_from_db()
    assert grant.ends_at == old_end + timedelta(hours=48)
    assert grant.expiry_warned_at is None  # warned again before the new end
    assert QuotaGrant.objects.filter(tenant=world.tenant).count() == 1  # no second grant
    assert capacity_services.free_capacity(world.rc) == free_before  # nothing counted twice
    verbs = list(
        AuditEvent.objects.filter(tenant=world.tenant).order_by("id").values_list("verb", flat=True)
    )
    assert verbs[-3:] == [
        "capacity_request.submitted",
        "quota_grant.extended",
        "capacity_request.approved",
    ]


@pytest.mark.django_db
def test_outside_the_envelope_it_waits_and_approval_extends_the_grant(world):
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=4, max_duration_hours=24)
    grant = _grant(world)
    renewal = renewal_services.submit_grant_renewal(
        actor=world.owner,
        grant=grant,
        ends_at=grant.ends_at + timedelta(days=10),
        justification="the long run",
    )
    assert renewal.state == CapacityRequest.State.SUBMITTED
    assert any("longer than the 24 h" in r for r in renewal.policy_reasons)
    old_end = grant.ends_at
    grant.refresh_from_db()
    assert grant.ends_at == old_end  # nothing moves until a platform admin says so

    approval_services.approve_capacity_request(actor=world.admin, request=renewal, comment="ok")
    grant.refresh_from_db()
    assert grant.ends_at == old_end + timedelta(days=10)
    assert _holding(world.rc) == 2

    # Given back: the grant ends where it ended before.
    request_services.cancel_capacity_request(
        actor=world.owner, request=renewal, comment="done early"
    )
    grant.refresh_from_db()
    assert grant.ends_at == old_end and grant.state == QuotaGrant.State.ACTIVE
    assert AuditEvent.objects.filter(verb="quota_grant.extension_withdrawn").count() == 1


@pytest.mark.django_db
def test_who_may_extend_and_what_cannot_be_extended(world):
    grant = _grant(world)
    later = grant.ends_at + timedelta(days=1)
    with pytest.raises(Forbidden):
        renewal_services.submit_grant_renewal(actor=world.viewer, grant=grant, ends_at=later)
    with pytest.raises(NotFound):
        renewal_services.submit_grant_renewal(actor=world.outsider, grant=grant, ends_at=later)
    with pytest.raises(InvalidInput, match="after the grant's end"):
        renewal_services.submit_grant_renewal(
            actor=world.member, grant=grant, ends_at=grant.ends_at
        )
    open_ended = QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, ends_at=None)
    with pytest.raises(InvalidInput, match="open-ended"):
        renewal_services.submit_grant_renewal(actor=world.member, grant=open_ended, ends_at=later)
    ended = _grant(world)
    grant_services.revoke_grant(actor=world.admin, grant=ended, comment="gone")
    with pytest.raises(InvalidTransition, match="ended"):
        renewal_services.submit_grant_renewal(actor=world.member, grant=ended, ends_at=later)


@pytest.mark.django_db
def test_a_renewal_approved_after_its_grant_ended_is_refused(world):
    grant = _grant(world)
    renewal = renewal_services.submit_grant_renewal(
        actor=world.member, grant=grant, ends_at=grant.ends_at + timedelta(days=5)
    )
    grant_services.revoke_grant(actor=world.admin, grant=grant, comment="taken back")
    with pytest.raises(InvalidTransition, match="ask for capacity anew"):
        approval_services.approve_capacity_request(actor=world.admin, request=renewal)


@pytest.mark.django_db
def test_the_grant_and_its_renewal_expire_together_at_the_new_end(world):
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=4, max_duration_hours=72)
    grant = _grant(world)
    new_end = grant.ends_at + timedelta(hours=24)
    renewal = renewal_services.submit_grant_renewal(
        actor=world.member, grant=grant, ends_at=new_end
    )
    assert grant_services.expire_grants(now=new_end - timedelta(minutes=1)) == 0
    assert grant_services.expire_grants(now=new_end) == 1
    grant.refresh_from_db()
    renewal.refresh_from_db()
    assert grant.state == QuotaGrant.State.EXPIRED
    assert renewal.state == CapacityRequest.State.EXPIRED


@pytest.mark.django_db
def test_the_expiry_mail_links_to_the_grants_extend_page(
    world, settings, django_capture_on_commit_callbacks
):
    settings.GRANT_EXPIRY_WARNING_HOURS = 48
    settings.PORTAL_BASE_URL = "https://portal.example.com"
    world.owner.email = "owner@example.com"
    world.owner.save()
    grant = _grant(world, days=1)
    with django_capture_on_commit_callbacks(execute=True):
        grant_services.warn_expiring_grants()
    deliver_due()
    assert f"https://portal.example.com/grants/{grant.pk}/extend/" in mail.outbox[0].body


@pytest.mark.django_db
def test_the_api_extends_a_grant_with_a_request_scoped_token(world):
    grant = _grant(world)
    _, raw = token_services.issue_token(
        actor=world.member, user=world.member, name="ci", scopes=["read", "request"]
    )
    _, read_raw = token_services.issue_token(
        actor=world.member, user=world.member, name="ro", scopes=["read"]
    )
    _, outsider_raw = token_services.issue_token(
        actor=world.outsider, user=world.outsider, name="x", scopes=["read", "request"]
    )
    url = f"/api/v1/grants/{grant.pk}/extend/"
    body = {"ends_at": (grant.ends_at + timedelta(days=3)).isoformat()}
    assert bearer(read_raw).post(url, body, format="json").status_code == 403
    assert bearer(outsider_raw).post(url, body, format="json").status_code == 404
    bad = bearer(raw).post(url, {"ends_at": "next tuesday"}, format="json")
    assert bad.status_code == 400
    early = bearer(raw).post(url, {"ends_at": grant.ends_at.isoformat()}, format="json")
    assert early.status_code == 400 and "after the grant's end" in early.data["detail"]
    created = bearer(raw).post(url, body, format="json")
    assert created.status_code == 201, created.data
    assert created.data["extends"] == grant.pk
    assert created.data["state"] == "submitted"
    assert created.data["items"] == {world.rc.slug: 2}


@pytest.mark.django_db
def test_the_grant_page_has_an_extend_button_for_members(world):
    grant = _grant(world)
    member = Client()
    member.force_login(world.member)
    team = member.get(f"/teams/{world.tenant.slug}/")
    assert f"/grants/{grant.pk}/extend/" in team.content.decode()
    page = member.get(f"/grants/{grant.pk}/extend/")
    assert page.status_code == 200 and b"Extend this grant" in page.content
    new_end = (grant.ends_at + timedelta(days=2)).astimezone(timezone.get_current_timezone())
    # a NUL in the justification: PostgreSQL cannot store it; a 400 that says so, nothing made
    nul = member.post(
        f"/grants/{grant.pk}/extend/",
        {"ends_at": new_end.strftime("%Y-%m-%dT%H:%M"), "justification": "mo\x00re"},
    )
    assert nul.status_code == 400 and "NUL character" in nul.content.decode()
    assert not CapacityRequest.objects.filter(extends=grant).exists()
    response = member.post(
        f"/grants/{grant.pk}/extend/",
        {"ends_at": new_end.strftime("%Y-%m-%dT%H:%M"), "justification": "more"},
    )
    renewal = CapacityRequest.objects.get(extends=grant)
    assert response.status_code == 302
    assert response["Location"] == f"/requests/{renewal.pk}/"
    bad = member.post(f"/grants/{grant.pk}/extend/", {"ends_at": "soon"})
    assert bad.status_code == 400
    viewer = Client()
    viewer.force_login(world.viewer)
    assert b"Extend this grant" not in viewer.get(f"/grants/{grant.pk}/extend/").content
    refused = viewer.post(f"/grants/{grant.pk}/extend/", {"ends_at": "2099-01-01T00:00"})
    assert refused.status_code == 403
    assert CapacityRequest.objects.filter(extends=grant).count() == 1
    outsider = Client()
    outsider.force_login(world.outsider)
    assert outsider.get(f"/grants/{grant.pk}/extend/").status_code == 404


@pytest.mark.django_db
def test_the_extend_form_takes_any_offset_in_utc_and_refuses_one_out_of_range(world):
    grant = _grant(world)
    member = Client()
    member.force_login(world.member)
    url = f"/grants/{grant.pk}/extend/"
    far = member.post(url, {"ends_at": "9999-12-31T23:00-05:00"})  # past year 9999 in UTC
    assert far.status_code == 400 and "out of range" in far.content.decode()
    assert not CapacityRequest.objects.filter(extends=grant).exists()
    # an offset PostgreSQL itself refuses (beyond ±15:59) is read as the instant it names
    end = grant.ends_at + timedelta(days=3)
    odd = end.astimezone(timezone.get_fixed_timezone(19 * 60 + 48))
    answer = member.post(url, {"ends_at": odd.strftime("%Y-%m-%dT%H:%M:%S+19:48")})
    assert answer.status_code == 302
    renewal = CapacityRequest.objects.get(extends=grant)
    assert renewal.ends_at == end.replace(microsecond=0)


@pytest.mark.django_db
def test_a_grant_ending_near_the_last_year_has_a_page_without_a_suggestion(world):
    grant = _grant(world)
    QuotaGrant.objects.filter(pk=grant.pk).update(ends_at=datetime(9999, 6, 1, tzinfo=UTC))
    member = Client()
    member.force_login(world.member)
    assert member.get(f"/grants/{grant.pk}/extend/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_renewal_and_new_asks_racing_for_the_last_units_never_overcommit():
    admin = PlatformAdminFactory()
    rc = ResourceClassFactory(slug="h100-80gb-mig-3g.40gb")
    PoolFactory(resource_class=rc, capacity=6)
    tenant = TenantFactory()
    now = timezone.now()
    grant = QuotaGrantFactory(
        tenant=tenant, resource_class=rc, amount=4, ends_at=now + timedelta(days=1)
    )
    renewal = CapacityRequestItemFactory(
        request=CapacityRequestFactory(
            tenant=tenant, starts_at=grant.ends_at, ends_at=now + timedelta(days=9), extends=grant
        ),
        resource_class=rc,
        amount=4,
    ).request
    asks = [
        CapacityRequestItemFactory(
            request=CapacityRequestFactory(tenant=TenantFactory(), ends_at=now + timedelta(days=3)),
            resource_class=rc,
            amount=1,
        ).request
        for _ in range(6)
    ]
    calls = [
        (lambda r=r: approval_services.approve_capacity_request(actor=admin, request=r))
        for r in asks
    ]
    # The renewal approved twice at once, too: once only.
    calls += [
        (lambda: approval_services.approve_capacity_request(actor=admin, request=renewal))
    ] * 2

    results = race(calls)

    approved_asks = [r for r in results[:6] if isinstance(r, CapacityRequest)]
    assert len(approved_asks) == 2  # 6 - 4: the renewal took nothing more
    renewal_results = results[6:]
    assert sum(isinstance(r, CapacityRequest) for r in renewal_results) == 1
    assert sum(isinstance(r, InvalidTransition) for r in renewal_results) == 1
    grant.refresh_from_db()
    assert grant.ends_at == now + timedelta(days=9)
    assert _holding(rc) == 6  # exactly the pool, never more
    assert QuotaGrant.objects.filter(tenant=tenant).count() == 1


@pytest.mark.django_db
def test_renewals_one_after_another_cannot_keep_a_grant_without_a_person_deciding(world):
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=4, max_duration_hours=72)
    grant = _grant(world)
    first_end = grant.ends_at
    first = renewal_services.submit_grant_renewal(
        actor=world.member, grant=grant, ends_at=first_end + timedelta(hours=48)
    )
    assert first.auto_approved  # 48 h given without a person: inside the 72 h
    grant.refresh_from_db()
    second = renewal_services.submit_grant_renewal(
        actor=world.member, grant=grant, ends_at=grant.ends_at + timedelta(hours=48)
    )
    # 96 h since the end a person approved: beyond the envelope, so a platform admin decides
    assert second.state == CapacityRequest.State.SUBMITTED and not second.auto_approved
    assert any("longer than the 72 h" in r for r in second.policy_reasons)
    approval_services.approve_capacity_request(actor=world.admin, request=second, comment="ok")
    grant.refresh_from_db()
    third = renewal_services.submit_grant_renewal(
        actor=world.member, grant=grant, ends_at=grant.ends_at + timedelta(hours=24)
    )
    assert third.auto_approved  # counted again from the end the admin approved


@pytest.mark.django_db
def test_units_kept_by_an_automatic_renewal_count_against_the_envelope(world):
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=4, max_duration_hours=72)
    grant = _grant(world, amount=4)  # decided by a person: not automatic
    renewal = renewal_services.submit_grant_renewal(
        actor=world.member, grant=grant, ends_at=grant.ends_at + timedelta(hours=24)
    )
    assert renewal.auto_approved
    assert auto_approved_units(world.tenant) == {world.rc.slug: 4}
    now = timezone.now()
    ask = request_services.submit_capacity_request(
        actor=world.member, tenant=world.tenant, items={world.rc.slug: 4},
        starts_at=now, ends_at=now + timedelta(hours=24), justification="more",
    )  # fmt: skip
    assert ask.state == CapacityRequest.State.SUBMITTED  # 4 + 4 is beyond the 4 automatic
    assert any("holds 4 approved automatically" in r for r in ask.policy_reasons)


@pytest.mark.django_db(transaction=True)
def test_the_expiry_job_never_ends_a_grant_a_renewal_moved_while_it_waited():
    """The job finds a grant due without a lock, then waits for the tenant's lock that an
    approval holds; the approval moves the end. Under the lock the job looks again and leaves
    the grant running."""
    import threading

    from django.db import transaction

    from tenants.services.locks import lock_rows
    from tests.tenants.factories import (
        PoolFactory,
        QuotaGrantFactory,
        ResourceClassFactory,
        TenantFactory,
    )

    rc = ResourceClassFactory(slug="h100-renew-race")
    PoolFactory(resource_class=rc, capacity=8)
    tenant = TenantFactory(slug="race-team")
    now = timezone.now()
    grant = QuotaGrantFactory(
        tenant=tenant, resource_class=rc, amount=1,
        starts_at=now - timedelta(days=1), ends_at=now - timedelta(seconds=1),
    )  # fmt: skip
    holding = threading.Event()

    def approval_moving_the_end():
        with transaction.atomic():
            lock_rows(tenant=tenant.pk)
            holding.set()
            # the job has listed the grant as due and now waits for this lock
            wait_until_another_waits_for_a_lock()
            QuotaGrant.objects.filter(pk=grant.pk).update(ends_at=now + timedelta(days=2))
        return "moved"

    def expiry_job():
        holding.wait(10)
        return grant_services.expire_grants(now=now)

    assert race([approval_moving_the_end, expiry_job]) == ["moved", 0]
    grant.refresh_from_db()
    assert grant.state == QuotaGrant.State.ACTIVE and grant.ends_at == now + timedelta(days=2)


@pytest.mark.django_db
def test_a_team_above_a_lowered_ceiling_cannot_extend_its_grants(world):
    from decimal import Decimal

    rule = AutoApprovalRule.objects.create(
        resource_class=world.rc, max_amount=4, max_duration_hours=72
    )
    grant = _grant(world, amount=4)
    tenant_services.update_tenant(actor=world.admin, tenant=world.tenant, gpu_ceiling=Decimal(1))
    with pytest.raises(QuotaExceeded, match="above its ceiling") as refused:
        renewal_services.submit_grant_renewal(
            actor=world.member, grant=grant, ends_at=grant.ends_at + timedelta(hours=12)
        )
    assert "ask the platform team to raise team-a's ceiling" in str(refused.value)
    old_end = grant.ends_at
    grant.refresh_from_db()
    assert grant.ends_at == old_end
    assert not CapacityRequest.objects.filter(extends=grant).exists()  # nothing half-written
    rule.delete()  # the platform team decides: its approval meets the same rule
    renewal = renewal_services.submit_grant_renewal(
        actor=world.member, grant=grant, ends_at=grant.ends_at + timedelta(hours=12)
    )
    with pytest.raises(QuotaExceeded, match="above its ceiling"):
        approval_services.approve_capacity_request(actor=world.admin, request=renewal, comment="ok")
    renewal.refresh_from_db()
    grant.refresh_from_db()
    assert renewal.state == CapacityRequest.State.SUBMITTED and grant.ends_at == old_end


# --- dates people mistype (issue 35, 9) ----------------------------------------------------------


def _field_error(html: str, field: str) -> str:
    """The error shown at a field of the page's form ('' when none)."""
    marker = f'id="id_{field}_error">'
    return html.split(marker, 1)[1].split("</div>", 1)[0] if marker in html else ""


@pytest.mark.django_db
def test_an_extension_to_year_9999_is_refused_at_the_date_by_the_classes_longest_grant(world):
    grant = _grant(world)
    member = Client()
    member.force_login(world.member)
    url = f"/grants/{grant.pk}/extend/"
    page = member.get(url).content.decode()
    assert "At the latest" in page and "the longest this class is granted" in page
    far = member.post(url, {"ends_at": "9999-12-31T00:00", "justification": "long run"})
    html = far.content.decode()
    assert far.status_code == 400
    assert "is granted for at most 365 days at a time" in _field_error(html, "ends_at")
    # what was typed stays
    assert 'value="9999-12-31T00:00"' in html and 'value="long run"' in html
    assert not CapacityRequest.objects.filter(extends=grant).exists()
    # the pool's policy sets the bound: 1,000 days is fine once the class allows it
    catalog_services.set_pool(actor=world.admin, resource_class=world.rc, max_grant_days=1500)
    later = timezone.localtime(timezone.now() + timedelta(days=1000))
    fine = member.post(url, {"ends_at": later.strftime("%Y-%m-%dT%H:%M")})
    assert fine.status_code == 302


@pytest.mark.django_db
def test_a_past_extension_date_is_a_worded_error_at_the_field_and_stays_typed(world):
    grant = _grant(world)
    member = Client()
    member.force_login(world.member)
    response = member.post(f"/grants/{grant.pk}/extend/", {"ends_at": "2020-01-01T09:30"})
    html = response.content.decode()
    assert response.status_code == 400
    error = _field_error(html, "ends_at")
    assert "That date has passed: the new end must be after the grant&#x27;s end" in error
    assert 'value="2020-01-01T09:30"' in html
    assert '<p class="error" role="alert">' not in html  # no banner above the card


@pytest.mark.django_db
def test_an_ask_beyond_the_classes_longest_grant_is_refused_at_its_end(world):
    member = Client()
    member.force_login(world.member)
    response = member.post(
        f"/teams/{world.tenant.slug}/ask/",
        {
            "resource_class": world.rc.pk,
            "amount": 1,
            "duration": "custom",
            "ends_at": "9999-12-31T00:00",
            "justification": "train",
        },
    )
    assert response.status_code == 200
    assert "granted for at most 365 days" in _field_error(response.content.decode(), "ends_at")
    assert not CapacityRequest.objects.exists()
    with pytest.raises(InvalidInput, match="granted for at most 365 days"):
        request_services.submit_capacity_request(
            actor=world.member,
            tenant=world.tenant,
            items={world.rc.slug: 1},
            ends_at=timezone.now() + timedelta(days=366),
            justification="train",
        )


@pytest.mark.django_db
@pytest.mark.parametrize("days", [0, -1, 3661, True, "30"])
def test_a_pools_longest_grant_is_whole_days_from_1_to_3660(world, days):
    with pytest.raises(InvalidInput, match="whole days from 1 to 3660"):
        catalog_services.set_pool(actor=world.admin, resource_class=world.rc, max_grant_days=days)
