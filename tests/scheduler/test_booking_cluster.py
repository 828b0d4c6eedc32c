"""Booking ahead on the real local cluster (issue 52): two teams share the same units in
windows one after the other, an overlapping ask is refused with the earliest window that
fits, and a booking reaches the team's ClusterQueue within a minute of its start and leaves it
within a minute of its end, through the trigger the product uses: beat's boundary pass
(`tenants.tasks.hint_grant_boundaries`, sent here every BOOKING_BOUNDARY_EVERY_S as beat
would) and a real Celery worker running the reconcile it hints.

Needs the local cluster and Redis (markers `cluster` and `celery`): the lead runs it."""

import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from catalog import slices
from core.errors import CapacityExceeded
from scheduler.cluster.reconcile.runs import TenantBusy, reconcile_cluster_objects, reconcile_tenant
from scheduler.cluster.reconcile.specs import tenant_namespace
from tenants.models import CapacityRequest, QuotaGrant
from tenants.services.approvals import approve_capacity_request
from tenants.services.requests import submit_capacity_request
from tenants.services.tenants import add_member, create_tenant
from tenants.tasks import hint_grant_boundaries
from tests.scheduler.cluster_helpers import celery_worker, unique_slug, wait_for
from tests.tenants.factories import (
    PlatformAdminFactory,
    PoolFactory,
    ResourceClassFactory,
    UserFactory,
)

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

MIG = "nvidia.com/mig-3g.40gb"
FLAVOR = "h100-80gb"
MINUTE = 60.0


@pytest.fixture
def workers(kube, settings):
    """The worker of the reconcile queue and of the default queue (the boundary pass)."""
    settings.RECONCILE_ON_COMMIT = True
    with celery_worker(["reconcile", settings.CELERY_TASK_DEFAULT_QUEUE], concurrency=2) as w:
        yield w


@pytest.fixture
def pool():
    rc = ResourceClassFactory(
        slug="h100-80gb-mig-3g.40gb", gpu_model="H100-80GB", resource_name=MIG
    )
    PoolFactory(resource_class=rc, capacity=4)
    return rc


def team(kube, tenant_namespaces, admin, prefix):
    tenant = create_tenant(actor=admin, slug=unique_slug(prefix), name=prefix)
    tenant_namespaces.append(tenant_namespace(tenant))
    add_member(actor=admin, tenant=tenant, username=UserFactory().username, role="member")
    reconcile_cluster_objects(kube)
    try:
        reconcile_tenant(kube, tenant.pk)
    except TenantBusy:  # with RECONCILE_ON_COMMIT the worker's reconcile got there first
        wait_for("the worker's reconcile", lambda: kube.get("ClusterQueue", tenant.namespace), 60)
    tenant.refresh_from_db()
    return tenant


def book(admin, tenant, rc, amount, starts_at, ends_at):
    request = submit_capacity_request(
        actor=admin,
        tenant=tenant,
        items={rc.slug: amount},
        starts_at=starts_at,
        ends_at=ends_at,
        justification="booking test",
    )
    return approve_capacity_request(actor=admin, request=request, comment="ok")


def nominal(kube, queue: str) -> str:
    """The team's ClusterQueue quota of the H100 flavor in compute slices ("0" when none)."""
    cq = kube.get("ClusterQueue", queue) or {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            if flavor["name"] == FLAVOR:
                for r in flavor["resources"]:
                    if r["name"] == slices.SLICE_RESOURCE:
                        return str(r["nominalQuota"])
    return "0"


def beat_until(what: str, check, deadline_s: float) -> float:
    """Send the boundary pass every BOOKING_BOUNDARY_EVERY_S, as beat does, until `check`
    holds; return the seconds it took (fails past `deadline_s`)."""
    period = settings.CELERY_BEAT_SCHEDULE["grant-boundaries"]["schedule"]
    began = time.monotonic()
    while time.monotonic() - began < deadline_s:
        hint_grant_boundaries.apply_async(expires=period)
        step_end = time.monotonic() + period
        while time.monotonic() < step_end:
            if check():
                return time.monotonic() - began
            time.sleep(0.5)
    raise AssertionError(f"{what}: not within {deadline_s:.0f} s")


def test_two_teams_share_the_units_in_turn_and_an_overlap_is_refused_with_a_window(
    kube, tenant_namespaces, pool
):
    admin = PlatformAdminFactory()
    booker = team(kube, tenant_namespaces, admin, "bk-a")
    earlier = team(kube, tenant_namespaces, admin, "bk-b")
    now = timezone.now()
    day = timedelta(days=1)
    book(admin, booker, pool, 4, now + 3 * day, now + 5 * day)  # every unit, days 3-5
    book(admin, earlier, pool, 4, None, now + 2 * day)  # the same units, days 0-2
    with pytest.raises(CapacityExceeded) as refused:
        book(admin, earlier, pool, 1, now + day, now + 4 * day)
    assert "the earliest window of the same length that fits is from" in refused.value.detail
    assert CapacityRequest.objects.filter(state=CapacityRequest.State.APPROVED).count() == 2
    reconcile_tenant(kube, booker.pk)
    reconcile_tenant(kube, earlier.pk)
    assert nominal(kube, booker.namespace) == "0"  # booked, not in force yet
    assert nominal(kube, earlier.namespace) == str(4 * 3)  # 4 × 3g, in compute slices


def test_a_booking_reaches_the_queue_within_a_minute_of_its_start_and_leaves_at_its_end(
    kube, tenant_namespaces, pool, workers
):
    admin = PlatformAdminFactory()
    tenant = team(kube, tenant_namespaces, admin, "bk-w")
    starts_at = timezone.now() + timedelta(seconds=20)
    ends_at = starts_at + timedelta(seconds=40)
    book(admin, tenant, pool, 2, starts_at, ends_at)
    grant = QuotaGrant.objects.get(tenant=tenant)
    assert grant.starts_at == starts_at
    # the approval's own reconcile ran on commit: nothing in force yet
    wait_for("the first reconcile", lambda: kube.get("ClusterQueue", tenant.namespace), timeout=60)
    assert nominal(kube, tenant.namespace) == "0"

    time.sleep(max(0.0, (starts_at - timezone.now()).total_seconds()))
    took = beat_until("in the queue", lambda: nominal(kube, tenant.namespace) == "6", MINUTE)
    assert took <= MINUTE

    time.sleep(max(0.0, (ends_at - timezone.now()).total_seconds()))
    took = beat_until("out of the queue", lambda: nominal(kube, tenant.namespace) == "0", MINUTE)
    assert took <= MINUTE
