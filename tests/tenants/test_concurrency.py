"""Approvals racing for the last capacity, on real PostgreSQL row locks."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.errors import CapacityExceeded, InvalidTransition
from tenants.models import AuditEvent, CapacityRequest, QuotaGrant
from tenants.services import approvals as approval_services
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

pytestmark = pytest.mark.django_db(transaction=True)


def test_twenty_approvals_racing_for_the_last_five_units_grant_exactly_five():
    admin = PlatformAdminFactory()
    rc = ResourceClassFactory(slug="h100-80gb-mig-3g.40gb")
    PoolFactory(resource_class=rc, capacity=16)
    QuotaGrantFactory(resource_class=rc, amount=11)  # 5 units left
    ends = timezone.now() + timedelta(days=3)
    requests = [
        CapacityRequestItemFactory(
            request=CapacityRequestFactory(tenant=TenantFactory(), ends_at=ends),
            resource_class=rc,
            amount=1,
        ).request
        for _ in range(20)
    ]
    events_before = AuditEvent.objects.count()

    results = race(
        [
            (
                lambda r=r: approval_services.approve_capacity_request(
                    actor=admin, request=r, comment="race"
                )
            )
            for r in requests
        ]
    )

    approved = [r for r in results if isinstance(r, CapacityRequest)]
    refused = [r for r in results if isinstance(r, CapacityExceeded)]
    assert len(approved) == 5, results
    assert len(refused) == 15
    assert all("only 0 of 16 can still be granted" in e.detail for e in refused)
    assert QuotaGrant.objects.holding().filter(resource_class=rc).count() == 6
    assert sum(QuotaGrant.objects.holding().values_list("amount", flat=True)) == 16
    states = sorted(CapacityRequest.objects.values_list("state", flat=True))
    assert states == ["approved"] * 5 + ["submitted"] * 15
    assert AuditEvent.objects.count() == events_before + 5


def test_the_same_request_approved_by_two_admins_at_once_is_approved_once():
    admins = [PlatformAdminFactory(), PlatformAdminFactory()]
    rc = ResourceClassFactory(slug="a100-80gb")
    PoolFactory(resource_class=rc, capacity=10)
    request = CapacityRequestItemFactory(resource_class=rc, amount=2).request

    results = race(
        [
            (lambda a=a: approval_services.approve_capacity_request(actor=a, request=request))
            for a in admins
        ]
    )

    assert sum(isinstance(r, CapacityRequest) for r in results) == 1
    assert sum(isinstance(r, InvalidTransition) for r in results) == 1
    assert QuotaGrant.objects.filter(request=request).count() == 1


def test_twenty_approvals_racing_for_the_last_units_of_a_window_grant_exactly_what_fits():
    """Booking ahead (issue 52): the check over a window holds under the same pool lock."""
    admin = PlatformAdminFactory()
    rc = ResourceClassFactory(slug="h100-80gb-mig-2g.20gb")
    PoolFactory(resource_class=rc, capacity=16)
    now = timezone.now()
    start, end = now + timedelta(days=3), now + timedelta(days=5)
    QuotaGrantFactory(resource_class=rc, amount=16, starts_at=now, ends_at=start)  # before
    QuotaGrantFactory(resource_class=rc, amount=11, starts_at=start, ends_at=end)  # 5 left
    requests = [
        CapacityRequestItemFactory(
            request=CapacityRequestFactory(tenant=TenantFactory(), starts_at=start, ends_at=end),
            resource_class=rc,
            amount=1,
        ).request
        for _ in range(20)
    ]

    results = race(
        [
            (
                lambda r=r: approval_services.approve_capacity_request(
                    actor=admin, request=r, comment="race"
                )
            )
            for r in requests
        ]
    )

    approved = [r for r in results if isinstance(r, CapacityRequest)]
    refused = [r for r in results if isinstance(r, CapacityExceeded)]
    assert (len(approved), len(refused)) == (5, 15), results
    booked = QuotaGrant.objects.filter(resource_class=rc, starts_at=start)
    assert sum(booked.values_list("amount", flat=True)) == 16
