"""Row locks of the governance core: one order (pools, tenant, request, grants) everywhere.

The races run on real PostgreSQL row locks, in threads with a connection each; a deadlock
shows up as an OperationalError in one of them. The order tests read the SQL each service
sends and check that its FOR UPDATE statements follow the documented order."""

import re
from datetime import timedelta

import pytest
from django.db import OperationalError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.errors import InvalidTransition
from tenants.models import AuditEvent, AutoApprovalRule, CapacityRequest, QuotaGrant, Tenant
from tenants.services import approvals as approval_services
from tenants.services import grants as grant_services
from tenants.services import requests as request_services
from tenants.services import tenants as tenant_services
from tenants.services.locks import LOCK_ORDER, lock_rows
from tests.race import race
from tests.tenants.factories import (
    CapacityRequestFactory,
    CapacityRequestItemFactory,
    PlatformAdminFactory,
    PoolFactory,
    QuotaGrantFactory,
    ResourceClassFactory,
    TenantFactory,
)

ROUNDS = 20
TABLES = {
    "scheduler_pool": "pools",
    "tenants_tenant": "tenant",
    "tenants_capacityrequest": "request",
    "tenants_quotagrant": "grants",
}


def approved_request_with_expired_grant(rc, grants=1):
    """An approved request whose grants ended a minute ago: due for expiry, still cancellable."""
    now = timezone.now()
    request = CapacityRequestFactory(
        tenant=TenantFactory(),
        state=CapacityRequest.State.APPROVED,
        starts_at=now - timedelta(hours=2),
        ends_at=now - timedelta(minutes=1),
    )
    CapacityRequestItemFactory(request=request, resource_class=rc, amount=grants)
    for _ in range(grants):
        QuotaGrantFactory(
            tenant=request.tenant,
            resource_class=rc,
            request=request,
            starts_at=request.starts_at,
            ends_at=request.ends_at,
        )
    return request


def verbs(tenant):
    return sorted(AuditEvent.objects.filter(tenant=tenant).values_list("verb", flat=True))


def unexpected(results, allowed=(InvalidTransition,)):
    return [r for r in results if isinstance(r, Exception) and not isinstance(r, allowed)]


# --- races ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("grants", [1, 2])
def test_cancel_racing_expiry_never_deadlocks_and_ends_each_grant_once(grants):
    rc = ResourceClassFactory(slug="a100-80gb")
    PoolFactory(resource_class=rc, capacity=100)
    outcomes = {"cancelled": 0, "expired": 0}
    for _ in range(ROUNDS):
        request = approved_request_with_expired_grant(rc, grants=grants)

        cancel, expired = race(
            [
                lambda r=request: request_services.cancel_capacity_request(
                    actor=r.requester, request=r, comment="done early"
                ),
                grant_services.expire_grants,
            ]
        )

        assert not unexpected([cancel, expired]), [cancel, expired]
        assert not isinstance(expired, OperationalError)
        request.refresh_from_db()
        ended = list(QuotaGrant.objects.filter(request=request))
        assert all(g.ended_at is not None for g in ended)
        n_expired = sum(g.state == QuotaGrant.State.EXPIRED for g in ended)
        n_revoked = sum(g.state == QuotaGrant.State.REVOKED for g in ended)
        assert n_expired + n_revoked == grants  # each grant ended exactly once
        assert expired == n_expired
        if isinstance(cancel, CapacityRequest):
            # The cancel came first, or between two grants' expiries: it revoked what was left.
            outcomes["cancelled"] += 1
            assert request.state == CapacityRequest.State.CANCELLED
            assert n_revoked >= 1
            assert verbs(request.tenant) == sorted(
                ["capacity_request.cancelled"] + ["quota_grant.expired"] * n_expired
            )
        else:
            # The expiry came first: the request ended with its grants; too late to cancel.
            outcomes["expired"] += 1
            assert isinstance(cancel, InvalidTransition), cancel
            assert request.state == CapacityRequest.State.EXPIRED
            assert n_expired == grants
            assert verbs(request.tenant) == sorted(
                ["capacity_request.expired"] + ["quota_grant.expired"] * grants
            )
    assert sum(outcomes.values()) == ROUNDS


@pytest.mark.django_db(transaction=True)
def test_reject_racing_expiry_never_deadlocks_and_the_expiry_wins():
    admin = PlatformAdminFactory()
    rc = ResourceClassFactory(slug="a100-80gb")
    PoolFactory(resource_class=rc, capacity=100)
    for _ in range(ROUNDS):
        request = approved_request_with_expired_grant(rc)

        rejected, expired = race(
            [
                lambda r=request: request_services.reject_capacity_request(
                    actor=admin, request=r, comment="too late"
                ),
                grant_services.expire_grants,
            ]
        )

        assert not unexpected([rejected, expired]), [rejected, expired]
        # An approved request cannot be rejected, before or after its expiry.
        assert isinstance(rejected, InvalidTransition), rejected
        assert expired == 1
        request.refresh_from_db()
        assert request.state == CapacityRequest.State.EXPIRED
        grant = QuotaGrant.objects.get(request=request)
        assert grant.state == QuotaGrant.State.EXPIRED and grant.ended_at is not None
        assert verbs(request.tenant) == ["capacity_request.expired", "quota_grant.expired"]


@pytest.mark.django_db(transaction=True)
def test_archive_cancel_and_expiry_racing_on_one_tenant_never_deadlock():
    """Archive locks tenant then grants; cancel and expiry tenant, request, grants."""
    rc = ResourceClassFactory(slug="a100-80gb")
    PoolFactory(resource_class=rc, capacity=100)
    admin = PlatformAdminFactory()
    for _ in range(ROUNDS):
        request = approved_request_with_expired_grant(rc, grants=2)
        tenant = request.tenant
        holding = QuotaGrantFactory(
            tenant=tenant, resource_class=rc, ends_at=timezone.now() + timedelta(days=1)
        )

        results = race(
            [
                lambda t=tenant: tenant_services.change_tenant_status(
                    actor=admin, tenant=t, action="archive"
                ),
                lambda r=request: request_services.cancel_capacity_request(
                    actor=r.requester, request=r
                ),
                grant_services.expire_grants,
            ]
        )

        assert not unexpected(results), results
        tenant.refresh_from_db()
        holding.refresh_from_db()
        assert tenant.status == Tenant.Status.ARCHIVED
        assert holding.state == QuotaGrant.State.REVOKED
        assert not QuotaGrant.objects.filter(tenant=tenant, state="active").exists()
        assert AuditEvent.objects.filter(tenant=tenant, verb="tenant.archived").count() == 1


# --- the order itself -----------------------------------------------------------------------


def locked_tables(queries) -> list[str]:
    """The concept each FOR UPDATE statement locks, in the order they were sent."""
    out = []
    for q in queries:
        sql = q["sql"]
        if "FOR UPDATE" not in sql:
            continue
        table = re.search(r'\bFROM "(\w+)"', sql).group(1)
        out.append(TABLES.get(table, table))
    return out


def assert_in_documented_order(concepts):
    ranks = [LOCK_ORDER.index(c) for c in concepts]
    assert ranks == sorted(ranks), concepts


@pytest.mark.django_db
def test_lock_rows_locks_pools_tenant_request_grants_in_that_order():
    rcs = [ResourceClassFactory(slug=s) for s in ("a100-80gb", "h100-80gb", "l4-24gb")]
    pools = [PoolFactory(resource_class=rc) for rc in rcs]
    request = CapacityRequestFactory()
    grants = [QuotaGrantFactory(tenant=request.tenant, request=request) for _ in range(3)]

    with transaction.atomic(), CaptureQueriesContext(connection) as ctx:
        locked = lock_rows(
            grants=[g.pk for g in reversed(grants)],
            request=request,
            tenant=request.tenant_id,
            pools=[rc.pk for rc in reversed(rcs)],
        )

    assert locked_tables(ctx.captured_queries) == ["pools", "tenant", "request", "grants"]
    assert list(locked.pools) == sorted(p.resource_class_id for p in pools)
    assert [g.pk for g in locked.grants] == sorted(g.pk for g in grants)
    assert locked.tenant.pk == request.tenant_id and locked.request.pk == request.pk
    pool_sql, grant_sql = ctx.captured_queries[0]["sql"], ctx.captured_queries[-1]["sql"]
    assert 'ORDER BY "scheduler_pool"."resource_class_id" ASC' in pool_sql
    assert 'ORDER BY "tenants_quotagrant"."id" ASC' in grant_sql


@pytest.mark.django_db
def test_lock_rows_takes_only_what_it_is_given_and_grants_as_a_queryset():
    request = CapacityRequestFactory()
    QuotaGrantFactory(tenant=request.tenant, request=request)
    QuotaGrantFactory(tenant=request.tenant, request=request, state=QuotaGrant.State.EXPIRED)

    with transaction.atomic(), CaptureQueriesContext(connection) as ctx:
        locked = lock_rows(request=request.pk, grants=request.grants.filter(state="active"))

    assert locked_tables(ctx.captured_queries) == ["request", "grants"]
    assert locked.pools == {} and locked.tenant_row is None
    with pytest.raises(LookupError):
        locked.tenant  # noqa: B018 - not locked: no silent None
    assert [g.state for g in locked.grants] == ["active"]


@pytest.mark.django_db(transaction=True)
def test_lock_rows_outside_a_transaction_is_refused():
    with pytest.raises(TransactionManagementError):
        lock_rows(tenant=TenantFactory())


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("approve", ["pools", "tenant", "request"]),
        ("grant", ["pools", "tenant"]),
        ("cancel", ["tenant", "request", "grants"]),
        ("revoke", ["tenant", "grants"]),
        ("submit", ["pools", "tenant"]),
        ("auto-approve", ["pools", "tenant"]),
        ("expire", ["tenant", "request", "grants"]),
        ("archive", ["tenant", "grants"]),
    ],
)
def test_every_service_locks_in_the_documented_order(world, name, expected):
    rc = world.rc
    request = CapacityRequestItemFactory(
        request=CapacityRequestFactory(tenant=world.tenant, requester=world.member),
        resource_class=rc,
        amount=2,
    ).request
    if name != "approve":
        approval_services.approve_capacity_request(actor=world.admin, request=request)
    if name == "auto-approve":
        AutoApprovalRule.objects.create(resource_class=rc, max_amount=5, max_duration_hours=48)
    calls = {
        "approve": lambda: approval_services.approve_capacity_request(
            actor=world.admin, request=request
        ),
        "grant": lambda: grant_services.grant_quota(
            actor=world.admin, tenant=world.tenant, resource_class=rc, amount=1
        ),
        "cancel": lambda: request_services.cancel_capacity_request(
            actor=world.member, request=request
        ),
        "revoke": lambda: grant_services.revoke_grant(
            actor=world.admin, grant=request.grants.get(), comment="capacity needed elsewhere"
        ),
        "submit": lambda: request_services.submit_capacity_request(
            actor=world.member,
            tenant=world.tenant,
            items={rc.slug: 1},
            ends_at=timezone.now() + timedelta(hours=12),
            justification="one more",
        ),
        "auto-approve": lambda: request_services.submit_capacity_request(
            actor=world.member,
            tenant=world.tenant,
            items={rc.slug: 1},
            ends_at=timezone.now() + timedelta(hours=12),
            justification="one more",
        ),
        "expire": lambda: grant_services.expire_grants(now=request.ends_at + timedelta(seconds=1)),
        "archive": lambda: tenant_services.change_tenant_status(
            actor=world.admin, tenant=world.tenant, action="archive"
        ),
    }

    with CaptureQueriesContext(connection) as ctx:
        calls[name]()

    concepts = locked_tables(ctx.captured_queries)
    assert concepts == expected
    assert_in_documented_order(concepts)
    if name == "auto-approve":
        assert CapacityRequest.objects.filter(auto_approved=True).count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", ["revoke", "cancel"])
def test_revoke_and_cancel_wait_for_the_tenant_lock_that_workload_admission_holds(name):
    """While a workload submit holds its tenant's row, a revoke or a cancel that would lower the
    tenant's grants waits for it: admission never counts a grant that is being taken away."""
    admin = PlatformAdminFactory()
    rc = ResourceClassFactory(slug="a100-80gb")
    PoolFactory(resource_class=rc, capacity=100)
    request = CapacityRequestItemFactory(resource_class=rc, amount=1).request
    approval_services.approve_capacity_request(actor=admin, request=request)
    grant = request.grants.get()

    def call(lock_timeout):
        with connection.cursor() as cursor:
            cursor.execute(f"SET lock_timeout = '{lock_timeout}'")
        if name == "revoke":
            return grant_services.revoke_grant(actor=admin, grant=grant, comment="needed elsewhere")
        return request_services.cancel_capacity_request(actor=request.requester, request=request)

    with transaction.atomic():
        # What `submit_workload` takes for the whole of its admission.
        Tenant.objects.select_for_update().get(pk=request.tenant_id)
        [waited] = race([lambda: call("300ms")])
    assert isinstance(waited, OperationalError), waited
    assert "lock timeout" in str(waited)
    grant.refresh_from_db()
    assert grant.state == QuotaGrant.State.ACTIVE  # nothing happened while the lock was held

    [done] = race([lambda: call("5s")])  # once admission committed, it goes through
    assert not isinstance(done, Exception), done
    grant.refresh_from_db()
    assert grant.state == QuotaGrant.State.REVOKED


@pytest.mark.django_db(transaction=True)
def test_two_owners_demoting_each_other_at_once_leave_one_owner():
    from core.errors import Forbidden, InvalidInput
    from tenants.models import Membership
    from tests.tenants.factories import MembershipFactory, UserFactory

    tenant = TenantFactory(slug="two-owners")
    ann, bob = (
        MembershipFactory(tenant=tenant, user=UserFactory(username=name), role="owner")
        for name in ("ann", "bob")
    )

    def demote(actor, membership):
        return lambda: tenant_services.change_member_role(
            actor=actor, membership=membership, role="member"
        )

    results = race([demote(ann.user, bob), demote(bob.user, ann)])
    # one is refused: as the last owner under the lock, or, when it came second, as no owner
    refused = [r for r in results if isinstance(r, InvalidInput | Forbidden)]
    assert len(refused) == 1, results
    assert Membership.objects.filter(tenant=tenant, role="owner").count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_same_person_added_twice_at_once_is_added_once_and_the_other_told_why():
    from core.errors import InvalidInput
    from tenants.models import Membership
    from tests.tenants.factories import MembershipFactory, UserFactory

    tenant = TenantFactory(slug="adding")
    owners = [
        MembershipFactory(tenant=tenant, user=UserFactory(username=n), role="owner").user
        for n in ("oona", "otto")
    ]
    UserFactory(username="newcomer")
    results = race(
        [
            lambda actor=actor: tenant_services.add_member(
                actor=actor, tenant=tenant, username="newcomer", role="member"
            )
            for actor in owners
        ]
    )
    assert sum(isinstance(r, Membership) for r in results) == 1, results
    refused = [r for r in results if isinstance(r, InvalidInput)]
    assert len(refused) == 1 and "newcomer is already in adding" in str(refused[0])
    assert Membership.objects.filter(tenant=tenant, user__username="newcomer").count() == 1
    assert AuditEvent.objects.filter(verb="membership.added", after__user="newcomer").count() == 1
