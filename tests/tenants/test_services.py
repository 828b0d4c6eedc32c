"""Services of the governance core on PostgreSQL: validation, permissions, audit, expiry."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from catalog import services as catalog
from core.errors import (
    CapacityExceeded,
    Forbidden,
    InvalidInput,
    InvalidTransition,
    NotFound,
    QuotaExceeded,
)
from tenants.models import AuditEvent, AutoApprovalRule, CapacityRequest, Membership, QuotaGrant
from tenants.notifications import deliver_due
from tenants.services import approvals as approval_services
from tenants.services import capacity as capacity_services
from tenants.services import grants as grant_services
from tenants.services import policy_rules
from tenants.services import requests as request_services
from tenants.services import tenants as tenant_services
from tests.tenants.factories import PoolFactory, QuotaGrantFactory, ResourceClassFactory

pytestmark = pytest.mark.django_db


def week():
    return timezone.now() + timedelta(days=7)


def ask(world, actor=None, amount=2, **kw):
    kw.setdefault("ends_at", week())
    kw.setdefault("justification", "train the model")
    return request_services.submit_capacity_request(
        actor=actor or world.member,
        tenant=kw.pop("tenant", world.tenant),
        items=kw.pop("items", {world.rc.slug: amount}),
        **kw,
    )


class Snapshot:
    """Counts of every table a refused call might touch: 'nothing changed' is checked, not hoped."""

    def __init__(self):
        self.counts = self._take()

    @staticmethod
    def _take():
        return (
            AuditEvent.objects.count(),
            CapacityRequest.objects.count(),
            QuotaGrant.objects.count(),
            list(CapacityRequest.objects.values_list("state", flat=True)),
            list(QuotaGrant.objects.values_list("state", flat=True)),
        )

    def unchanged(self):
        return self._take() == self.counts


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ({"v100": 1}, "unknown resource class 'v100'"),
        ({"a100-80gb-mig-3g.40gb": 0}, "amount must be at least 1, not 0"),
        ({"a100-80gb-mig-3g.40gb": -3}, "amount must be at least 1"),
        ({"a100-80gb-mig-3g.40gb": 1.5}, "amount must be a whole number"),
        ({"a100-80gb-mig-3g.40gb": "2"}, "amount must be a whole number"),
        ({}, "ask for at least one resource class"),
    ],
)
def test_bad_items_are_refused_and_change_nothing(world, items, message):
    before = Snapshot()
    with pytest.raises(InvalidInput, match=message) as err:
        ask(world, items=items)
    assert err.value.field == "items"
    assert before.unchanged()


@pytest.mark.parametrize(
    ("starts", "ends", "message"),
    [
        (None, -timedelta(hours=1), "end must be in the future"),
        (timedelta(days=3), timedelta(days=2), "end must be after the start"),
        (-timedelta(days=1), timedelta(days=2), "start must not be in the past"),
    ],
)
def test_bad_dates_are_refused(world, starts, ends, message):
    now = timezone.now()
    before = Snapshot()
    with pytest.raises(InvalidInput, match=message):
        ask(world, starts_at=now + starts if starts else None, ends_at=now + ends)
    assert before.unchanged()


def test_missing_justification(world):
    with pytest.raises(InvalidInput, match="say why"):
        ask(world, justification="  ")


def test_over_pool_capacity_says_how_many_are_free(world):
    QuotaGrantFactory(tenant=world.other_tenant, resource_class=world.rc, amount=7)
    before = Snapshot()
    with pytest.raises(CapacityExceeded, match="asked for 4 but only 3 of 10 can still be granted"):
        ask(world, amount=4)
    assert before.unchanged()


def test_overcommit_ratio_raises_what_can_be_granted(world):
    world.pool.overcommit_ratio = Decimal("1.5")
    world.pool.save()
    request = ask(world, amount=15)
    assert request.state == CapacityRequest.State.SUBMITTED
    with pytest.raises(CapacityExceeded, match="only 15 of 15"):
        ask(world, amount=16)


def test_over_tenant_ceiling(world):
    world.tenant.gpu_ceiling = Decimal("1")
    world.tenant.save()
    with pytest.raises(QuotaExceeded, match="at most 1 GPU-equivalents.*room left: 1"):
        ask(world, amount=3)  # 3 × 3/7 = 1.29 GPU-equivalents


@pytest.mark.parametrize("who", ["viewer", "outsider", "anonymous"])
def test_who_may_not_ask(world, who):
    from django.contrib.auth.models import AnonymousUser

    actor = AnonymousUser() if who == "anonymous" else getattr(world, who)
    expected = Forbidden if who == "viewer" else NotFound
    before = Snapshot()
    with pytest.raises(expected):
        ask(world, actor=actor)
    assert before.unchanged()


def test_suspended_tenant_cannot_ask(world):
    tenant_services.change_tenant_status(actor=world.admin, tenant=world.tenant, action="suspend")
    with pytest.raises(InvalidInput, match="suspended"):
        ask(world)


# --- workflow through services ----------------------------------------------------------------


def test_submit_writes_one_event_and_waits_without_an_envelope(world):
    request = ask(world)
    assert request.state == CapacityRequest.State.SUBMITTED
    assert request.policy_reasons == [f"{world.rc.slug}: no auto-approval for this class"]
    events = list(AuditEvent.objects.values_list("verb", flat=True))
    assert events == ["capacity_request.submitted"]


def test_policy_auto_approves_inside_the_envelope(world):
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=2, max_duration_hours=200)
    request = ask(world, amount=2)
    assert request.state == CapacityRequest.State.APPROVED and request.auto_approved
    assert request.decided_by is None
    grant = request.grants.get()
    assert (grant.amount, grant.ends_at) == (2, request.ends_at)
    verbs = list(AuditEvent.objects.order_by("id").values_list("verb", "actor_repr"))
    assert verbs == [
        ("capacity_request.submitted", "member"),
        ("capacity_request.approved", "system"),
    ]


def test_approve_creates_grants_and_one_event(world):
    request = ask(world, amount=3)
    n = AuditEvent.objects.count()
    approval_services.approve_capacity_request(actor=world.admin, request=request, comment="ok")
    request.refresh_from_db()
    assert request.state == CapacityRequest.State.APPROVED
    assert request.decided_by == world.admin and request.decision_comment == "ok"
    assert request.grants.get().amount == 3
    event = AuditEvent.objects.order_by("-id").first()
    assert AuditEvent.objects.count() == n + 1
    assert (event.verb, event.before["state"], event.after["state"]) == (
        "capacity_request.approved",
        "submitted",
        "approved",
    )


def test_only_platform_admins_approve_and_reject(world):
    request = ask(world)
    for actor in (world.owner, world.member):
        with pytest.raises(Forbidden):
            approval_services.approve_capacity_request(actor=actor, request=request)
        with pytest.raises(Forbidden):
            request_services.reject_capacity_request(actor=actor, request=request, comment="no")


def test_approving_twice_is_an_invalid_transition(world):
    request = ask(world)
    approval_services.approve_capacity_request(actor=world.admin, request=request)
    before = Snapshot()
    with pytest.raises(InvalidTransition, match="it is approved"):
        approval_services.approve_capacity_request(actor=world.admin, request=request)
    assert before.unchanged()


def test_capacity_is_checked_again_at_approval(world):
    request = ask(world, amount=6)
    QuotaGrantFactory(tenant=world.other_tenant, resource_class=world.rc, amount=5)
    before = Snapshot()
    with pytest.raises(CapacityExceeded, match="only 5 of 10"):
        approval_services.approve_capacity_request(actor=world.admin, request=request)
    assert before.unchanged()


def test_reject_needs_a_reason(world):
    request = ask(world)
    with pytest.raises(InvalidInput, match="say why"):
        request_services.reject_capacity_request(actor=world.admin, request=request, comment="")
    request_services.reject_capacity_request(actor=world.admin, request=request, comment="too big")
    request.refresh_from_db()
    assert request.state == CapacityRequest.State.REJECTED


def test_cancel_by_requester_owner_but_not_another_member(world):
    request = ask(world, actor=world.owner)
    with pytest.raises(Forbidden, match="need the role owner"):
        request_services.cancel_capacity_request(actor=world.member, request=request)
    mine = ask(world, actor=world.member)
    request_services.cancel_capacity_request(actor=world.member, request=mine)
    request_services.cancel_capacity_request(actor=world.owner, request=request)
    assert set(CapacityRequest.objects.values_list("state", flat=True)) == {"cancelled"}


def test_cancelling_an_approved_request_gives_capacity_back(world):
    request = ask(world, amount=10)
    approval_services.approve_capacity_request(actor=world.admin, request=request)
    assert capacity_services.free_capacity(world.rc) == 0
    request_services.cancel_capacity_request(actor=world.member, request=request)
    assert capacity_services.free_capacity(world.rc) == 10
    assert request.grants.get().state == QuotaGrant.State.REVOKED


def test_provision_is_idempotent(world):
    request = ask(world)
    approval_services.approve_capacity_request(actor=world.admin, request=request)
    request_services.mark_request_provisioned(request=request)
    request_services.mark_request_provisioned(request=request)
    assert AuditEvent.objects.filter(verb="capacity_request.provisioned").count() == 1


# --- expiry and warnings ----------------------------------------------------------------------


def test_expiry_ends_grants_and_requests_once(world):
    request = ask(world, ends_at=timezone.now() + timedelta(hours=1))
    approval_services.approve_capacity_request(actor=world.admin, request=request)
    later = timezone.now() + timedelta(hours=2)
    assert grant_services.expire_grants(now=later) == 1
    assert grant_services.expire_grants(now=later) == 0  # idempotent
    request.refresh_from_db()
    assert request.state == CapacityRequest.State.EXPIRED
    assert request.grants.get().state == QuotaGrant.State.EXPIRED
    verbs = list(AuditEvent.objects.filter(verb__contains="expired").values_list("verb", flat=True))
    assert sorted(verbs) == ["capacity_request.expired", "quota_grant.expired"]


def test_open_ended_grants_never_expire(world):
    QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, ends_at=None)
    assert grant_services.expire_grants(now=timezone.now() + timedelta(days=3650)) == 0


def test_owners_are_warned_once_before_the_end(world, settings, django_capture_on_commit_callbacks):
    settings.GRANT_EXPIRY_WARNING_HOURS = 48
    world.owner.email = "owner@example.com"
    world.owner.save()
    soon = QuotaGrantFactory(
        tenant=world.tenant, resource_class=world.rc, ends_at=timezone.now() + timedelta(hours=24)
    )
    QuotaGrantFactory(
        tenant=world.tenant, resource_class=world.rc, ends_at=timezone.now() + timedelta(days=30)
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert grant_services.warn_expiring_grants() == 1
        assert grant_services.warn_expiring_grants() == 0
    deliver_due()  # what the worker does with the queued delivery (tests/tenants/test_notify*)
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["owner@example.com"]
    assert "quota ends soon" in mail.outbox[0].subject
    soon.refresh_from_db()
    assert soon.expiry_warned_at is not None


# --- tenants, members, pools -----------------------------------------------------------------


def test_create_tenant_makes_a_robot_and_one_event(world):
    tenant = tenant_services.create_tenant(actor=world.admin, slug="vision", name="Vision")
    assert tenant.robot.username == "robot-vision"
    assert tenant.memberships.get(user=tenant.robot).role == Membership.Role.MEMBER
    assert AuditEvent.objects.filter(tenant=tenant).count() == 1


@pytest.mark.parametrize("slug", ["Vision", "-x", "a_b", "x" * 41, "", "ünï"])
def test_tenant_slug_must_be_a_dns_label(world, slug):
    with pytest.raises(InvalidInput, match="slug"):
        tenant_services.create_tenant(actor=world.admin, slug=slug, name="X")


def test_only_admins_create_tenants_and_duplicates_are_refused(world):
    with pytest.raises(Forbidden):
        tenant_services.create_tenant(actor=world.owner, slug="x", name="X")
    with pytest.raises(InvalidInput, match="exists already"):
        tenant_services.create_tenant(actor=world.admin, slug="team-a", name="X")


def test_archive_ends_grants(world):
    QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, amount=3)
    tenant_services.change_tenant_status(actor=world.admin, tenant=world.tenant, action="archive")
    assert not QuotaGrant.objects.holding().filter(tenant=world.tenant).exists()
    with pytest.raises(InvalidTransition):
        tenant_services.change_tenant_status(
            actor=world.admin, tenant=world.tenant, action="suspend"
        )


def test_members_are_managed_by_owners_only(world):
    from tests.tenants.factories import UserFactory

    UserFactory(username="newbie")
    with pytest.raises(Forbidden):
        tenant_services.add_member(
            actor=world.member, tenant=world.tenant, username="newbie", role="viewer"
        )
    m = tenant_services.add_member(
        actor=world.owner, tenant=world.tenant, username="newbie", role="viewer"
    )
    with pytest.raises(InvalidInput, match="already in"):
        tenant_services.add_member(
            actor=world.owner, tenant=world.tenant, username="newbie", role="viewer"
        )
    with pytest.raises(InvalidInput, match="unknown role"):
        tenant_services.change_member_role(actor=world.owner, membership=m, role="god")
    tenant_services.change_member_role(actor=world.owner, membership=m, role="member")
    tenant_services.remove_member(actor=world.owner, membership=m)
    verbs = list(AuditEvent.objects.order_by("id").values_list("verb", flat=True))
    assert verbs == ["membership.added", "membership.changed", "membership.removed"]


def test_the_last_owner_cannot_leave(world):
    owner = Membership.objects.get(user=world.owner)
    with pytest.raises(InvalidInput, match="last owner"):
        tenant_services.remove_member(actor=world.owner, membership=owner)
    with pytest.raises(InvalidInput, match="last owner"):
        tenant_services.change_member_role(actor=world.owner, membership=owner, role="member")


def test_pool_and_policy_changes_are_audited(world):
    catalog.set_pool(
        actor=world.admin, resource_class=world.rc, capacity=12, overcommit_ratio=Decimal("1.25")
    )
    policy_rules.set_auto_approval_rule(
        actor=world.admin, resource_class=world.rc, max_amount=1, max_duration_hours=24
    )
    assert list(AuditEvent.objects.order_by("id").values_list("verb", flat=True)) == [
        "pool.changed",
        "policy.changed",
    ]
    with pytest.raises(Forbidden):
        catalog.set_pool(actor=world.owner, resource_class=world.rc, capacity=99)


def test_direct_grant_is_capacity_checked(world):
    rc = ResourceClassFactory(slug="h200-141gb", kind="whole", profile="")
    PoolFactory(resource_class=rc, capacity=2)
    grant_services.grant_quota(actor=world.admin, tenant=world.tenant, resource_class=rc, amount=2)
    with pytest.raises(CapacityExceeded):
        grant_services.grant_quota(
            actor=world.admin, tenant=world.tenant, resource_class=rc, amount=1
        )


# --- the audit log itself -------------------------------------------------------------------


def test_audit_rows_carry_the_request_id(world):
    from core.request_context import set_request_id

    set_request_id("req-1234567890")
    try:
        ask(world)
    finally:
        set_request_id(None)
    assert AuditEvent.objects.get().request_id == "req-1234567890"


def test_audit_log_is_append_only_in_the_database(world):
    ask(world)
    event = AuditEvent.objects.get()
    for sql in (
        f"UPDATE tenants_auditevent SET verb='x' WHERE id={event.pk}",
        f"DELETE FROM tenants_auditevent WHERE id={event.pk}",
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(sql)
    assert AuditEvent.objects.get().verb == "capacity_request.submitted"


def test_database_constraints_back_the_services(world):
    with pytest.raises(IntegrityError), transaction.atomic():
        QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, amount=0)
