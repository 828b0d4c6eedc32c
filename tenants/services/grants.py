"""Quota grants: granted directly by the platform team, revoked, expired when their end has
passed, and announced to the owners before that."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from catalog.models import ResourceClass
from core import audit
from core.errors import InvalidInput, InvalidTransition
from core.permissions import require_platform_admin
from tenants.models import CapacityRequest, QuotaGrant, Tenant
from tenants.notifications import notify
from tenants.services import placing
from tenants.services.audit_fields import GRANT_FIELDS
from tenants.services.capacity import check_capacity, check_ceiling, check_dates, resolve_items
from tenants.services.follow_up import notify_desired_state_changed, portal_url
from tenants.services.locks import lock_rows
from tenants.services.requests import system_transition, system_transition_locked


def grant_quota(
    *,
    actor,
    tenant: Tenant,
    resource_class: ResourceClass,
    amount: int,
    ends_at: datetime | None = None,
    comment: str = "",
    placement: str = "",
) -> QuotaGrant:
    """A platform admin grants quota directly (no request), under the same capacity check,
    to run where the team's other grants run (`placement`: tenants/placement.py)."""
    require_platform_admin(actor, "grant quota directly")
    now = timezone.now()
    placement = placing.checked(placement)
    resolved = resolve_items({resource_class.slug: amount})
    if ends_at is not None:
        check_dates(now, ends_at, now)
    with transaction.atomic():
        locked = lock_rows(pools=[resource_class.pk], tenant=tenant)
        check_capacity(resolved, now, pools=locked.pools)
        tenant = locked.tenant
        if not tenant.is_active:
            raise InvalidTransition(f"{tenant.slug} is {tenant.status}: nothing can be granted")
        check_ceiling(tenant, resolved, now)
        placing.check_same_place(tenant, placement)
        grant = QuotaGrant.objects.create(
            placement=placement,
            tenant=tenant,
            resource_class=resource_class,
            amount=amount,
            starts_at=now,
            ends_at=ends_at,
            created_by=actor,
        )
        audit.record(
            actor=actor,
            verb="quota_grant.created",
            obj=grant,
            tenant=tenant,
            after={**audit.snapshot(grant, GRANT_FIELDS), "comment": comment},
        )
        notify_desired_state_changed(tenant)
    return grant


def revoke_grant(*, actor, grant: QuotaGrant, comment: str) -> QuotaGrant:
    require_platform_admin(actor, "revoke grants")
    with transaction.atomic():
        # The tenant first, as workload admission takes it: an admission counting this grant
        # finishes before it ends, and one that starts after sees it gone.
        tenant_id = QuotaGrant.objects.values_list("tenant_id", flat=True).get(pk=grant.pk)
        locked = lock_rows(tenant=tenant_id, grants=[grant.pk])
        grant = locked.grants[0]
        grant.tenant = locked.tenant
        before = audit.snapshot(grant, GRANT_FIELDS)
        grant.end(QuotaGrant.State.REVOKED, timezone.now())
        grant.save(update_fields=["state", "ended_at"])
        audit.record(
            actor=actor,
            verb="quota_grant.revoked",
            obj=grant,
            tenant=grant.tenant,
            before=before,
            after={**audit.snapshot(grant, GRANT_FIELDS), "comment": comment},
        )
        notify_desired_state_changed(grant.tenant)
    return grant


def set_grant_end(*, actor, grant: QuotaGrant, ends_at: datetime | None, comment: str = ""):
    """The platform team gives a grant an end, or brings its end forward: an open-ended grant
    holds every instant from its start, so it blocks every booking of its units until it has
    one. Only ever shorter (longer is a renewal, checked against the pool); no capacity check
    is needed to give units back. Audited; the cluster follows at the new end."""
    require_platform_admin(actor, "set the end of a grant")
    now = timezone.now()
    if ends_at is None:
        raise InvalidInput("say when the grant ends", field="ends_at")
    if ends_at <= now:
        raise InvalidInput(
            "the end must be in the future; to end a grant now, revoke it", field="ends_at"
        )
    with transaction.atomic():
        tenant_id = QuotaGrant.objects.values_list("tenant_id", flat=True).get(pk=grant.pk)
        locked = lock_rows(tenant=tenant_id, grants=[grant.pk])
        grant = locked.grants[0]
        grant.tenant = locked.tenant
        if grant.state != QuotaGrant.State.ACTIVE:
            raise InvalidTransition(f"grant #{grant.pk} is {grant.state}: it has ended already")
        if ends_at <= grant.starts_at:
            raise InvalidInput(
                f"the end must be after the grant's start ({grant.starts_at:%Y-%m-%d %H:%M %Z})",
                field="ends_at",
            )
        if grant.ends_at is not None and ends_at >= grant.ends_at:
            raise InvalidInput(
                f"grant #{grant.pk} ends at {grant.ends_at:%Y-%m-%d %H:%M %Z} already: choose "
                "an earlier end, or extend the grant to keep it longer",
                field="ends_at",
            )
        before = audit.snapshot(grant, GRANT_FIELDS)
        grant.ends_at = ends_at
        grant.expiry_warned_at = None
        grant.save(update_fields=["ends_at", "expiry_warned_at"])
        audit.record(
            actor=actor,
            verb="quota_grant.end_set",
            obj=grant,
            tenant=grant.tenant,
            before=before,
            after={**audit.snapshot(grant, GRANT_FIELDS), "comment": comment},
        )
        notify_desired_state_changed(grant.tenant)
    return grant


def expire_grants(*, now: datetime | None = None) -> int:
    """End every grant whose end has passed, and requests all of whose grants ended.
    Idempotent: a second run finds nothing to do. Returns the number of grants ended."""
    now = now or timezone.now()
    ended = 0
    # Find the due grants without a lock; then lock each in the order of `lock_rows` (its
    # tenant, its request, the grant), as a cancel does, and look again under the locks.
    due = list(
        QuotaGrant.objects.filter(state=QuotaGrant.State.ACTIVE, ends_at__lte=now)
        .select_related("resource_class")
        .only("pk", "tenant_id", "request_id", "resource_class")
    )
    classes = {g.pk: g.resource_class for g in due}  # read with the grants, for the mail
    for pk, tenant_id, request_id in ((g.pk, g.tenant_id, g.request_id) for g in due):
        with transaction.atomic():
            locked = lock_rows(tenant=tenant_id, request=request_id, grants=[pk])
            grant = locked.grants[0] if locked.grants else None
            # Looked at again under the locks: a renewal approved meanwhile moved its end.
            if grant is None or grant.state != QuotaGrant.State.ACTIVE:
                continue
            if grant.ends_at is None or grant.ends_at > now:
                continue
            request = locked.request_row
            grant.tenant = locked.tenant
            grant.request = request
            before = audit.snapshot(grant, GRANT_FIELDS)
            grant.end(QuotaGrant.State.EXPIRED, now)
            grant.save(update_fields=["state", "ended_at"])
            audit.record(
                actor=None,
                verb="quota_grant.expired",
                obj=grant,
                tenant=grant.tenant,
                before=before,
                after=audit.snapshot(grant, GRANT_FIELDS),
            )
            if (
                request is not None
                and request.can("expire")
                and not request.grants.filter(state=QuotaGrant.State.ACTIVE).exists()
            ):
                system_transition_locked(request, "expire")
            grant.resource_class = classes[pk]
            notify(
                "grant.expired",
                grant.tenant,
                subject=f"[GPU Portal] {grant.tenant.slug}: quota ended",
                text=(
                    f"The grant of {grant.amount} × {grant.resource_class.slug} for "
                    f"{grant.tenant.slug} ended at {grant.ends_at:%Y-%m-%d %H:%M %Z}. Ask for "
                    f"capacity again at {portal_url('team_detail', grant.tenant.slug)}"
                ),
                data=_grant_data(grant),
            )
            notify_desired_state_changed(grant.tenant)
            ended += 1
    _expire_renewals_of_ended_grants()
    return ended


def _expire_renewals_of_ended_grants() -> None:
    """Approved renewals end with the grant they extended (expired or revoked), each in its
    own transaction that locks only the request: the lock order holds."""
    stale = (
        CapacityRequest.objects.filter(
            extends__isnull=False,
            state__in=[CapacityRequest.State.APPROVED, CapacityRequest.State.PROVISIONED],
        )
        .exclude(extends__state=QuotaGrant.State.ACTIVE)
        .values_list("pk", flat=True)
    )
    for pk in list(stale):
        with transaction.atomic():
            system_transition(pk, "expire")


def grant_extend_url(grant: QuotaGrant) -> str:
    """The grant's "extend" page, as mails and chat messages link to it."""
    return portal_url("tenants:grant_extend", grant.pk)


def _grant_data(grant: QuotaGrant) -> dict:
    return {
        "grant": grant.pk,
        "resource_class": grant.resource_class.slug,
        "amount": grant.amount,
        "ends_at": grant.ends_at.isoformat() if grant.ends_at else None,
    }


def warn_expiring_grants(*, now: datetime | None = None, bookings: bool = False) -> int:
    """Mail the owners of each grant that ends within the warning window, once per grant.
    A booking (a grant whose team was told it started) is warned a day before its end
    (`BOOKING_END_WARNING_HOURS`), by the bookings' pass (`bookings`), not before."""
    now = now or timezone.now()
    booking_horizon = now + timedelta(hours=settings.BOOKING_END_WARNING_HOURS)
    horizon = (
        booking_horizon if bookings else now + timedelta(hours=settings.GRANT_EXPIRY_WARNING_HOURS)
    )
    warned = 0
    due = QuotaGrant.objects.filter(
        state=QuotaGrant.State.ACTIVE,
        ends_at__gt=now,
        ends_at__lte=horizon,
        expiry_warned_at__isnull=True,
    )
    if bookings:
        due = due.filter(start_notified_at__isnull=False)
    else:  # a booking waits for its day-before warning
        due = due.exclude(start_notified_at__isnull=False, ends_at__gt=booking_horizon)
    for pk in list(due.values_list("pk", flat=True)):
        with transaction.atomic():
            grant = (
                QuotaGrant.objects.select_for_update(of=("self",))
                .select_related("tenant", "resource_class")
                .get(pk=pk)
            )
            if grant.expiry_warned_at is not None or grant.state != QuotaGrant.State.ACTIVE:
                continue
            owners = grant.tenant.owner_emails()
            grant.expiry_warned_at = now
            grant.save(update_fields=["expiry_warned_at"])
            audit.record(
                actor=None,
                verb="quota_grant.expiry_warned",
                obj=grant,
                tenant=grant.tenant,
                after={"ends_at": str(grant.ends_at), "recipients": owners},
            )
            notify(
                "grant.expiring",
                grant.tenant,
                subject=f"[GPU Portal] {grant.tenant.slug}: quota ends soon",
                text=(
                    f"The grant of {grant.amount} × {grant.resource_class.slug} for "
                    f"{grant.tenant.slug} ends at {grant.ends_at:%Y-%m-%d %H:%M %Z}. If you "
                    f"still need it, extend it before then: {grant_extend_url(grant)}"
                ),
                data=_grant_data(grant) | {"extend_url": grant_extend_url(grant)},
            )
            warned += 1
    return warned
