"""Approving a capacity request: the platform admin's decision (or the policy's, for an ask
inside the envelope) under the locks, the grants it creates or, for a renewal, the end of the
grant it moves, and the requester told how it was decided."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from catalog.models import Pool, ResourceClass
from core import audit, bounds
from core.errors import CapacityExceeded, InvalidTransition, QuotaExceeded
from tenants.capacity_time import Window
from tenants.models import CapacityRequest, QuotaGrant, Tenant
from tenants.notifications import notify
from tenants.services import departments
from tenants.services.audit_fields import REQUEST_FIELDS
from tenants.services.capacity import check_capacity, check_ceiling, window_words
from tenants.services.follow_up import notify_desired_state_changed, portal_url
from tenants.services.locks import LockedRows, lock_rows
from tenants.services.placing import team_placement


def notify_decided(request: CapacityRequest) -> None:
    """Tell the requester how their ask was decided (in the deciding transaction)."""
    by = request.decided_by.get_username() if request.decided_by else "the policy"
    comment = f": {request.decision_comment}" if request.decision_comment else ""
    notify(
        "capacity_request.decided",
        request.tenant,
        subject=f"[GPU Portal] request #{request.pk} of {request.tenant.slug} {request.state}",
        text=(
            f"Request #{request.pk} was {request.state} by {by}{comment}\n"
            f"{portal_url('tenants:request_detail', request.pk)}"
        ),
        data={"request": request.pk, "state": request.state, "decided_by": by},
        person=request.requester,
    )


def decision_comment(comment: str | None) -> str:
    """A decision's comment if its column can store it, else a 400 at the comment."""
    column = CapacityRequest._meta.get_field("decision_comment")
    return bounds.text_for(comment or "", column, "comment")


def approve_capacity_request(
    *, actor, request: CapacityRequest, comment: str = ""
) -> CapacityRequest:
    """A platform admin approves any ask; an admin of the team's department only what keeps
    the department within its quota (a 403 that says so above it)."""
    tenant = Tenant.objects.select_related("department").get(pk=request.tenant_id)
    bound = departments.require_approver(actor, tenant, "approve capacity requests")
    return _approve(
        actor=actor,
        request=request,
        comment=decision_comment(comment),
        within_department=bound is not None,
    )


def _approve(
    *, actor, request: CapacityRequest, comment: str, within_department: bool = False
) -> CapacityRequest:
    now = timezone.now()
    # Refuse a wrong state early and clearly; it is checked again under the lock below.
    CapacityRequest.objects.only("state").get(pk=request.pk).transition("approve")
    with transaction.atomic():
        items = [
            (i.resource_class, i.amount) for i in request.items.select_related("resource_class")
        ]
        extends_id = request.extends_id  # set when the ask was made, never changed
        locked = lock_rows(
            pools=[rc.pk for rc, _ in items],
            tenant=request.tenant_id,
            request=request,
            grants=[extends_id] if extends_id else None,
        )
        return approve_locked(
            actor=actor,
            locked=locked,
            request=locked.request,
            items=items,
            comment=comment,
            now=now,
            extended=locked.grants[0] if extends_id else None,
            within_department=within_department,
        )


def approve_locked(
    *,
    actor,
    locked: LockedRows,
    request: CapacityRequest,
    items: list[tuple[ResourceClass, int]],
    comment: str,
    now: datetime,
    extended: QuotaGrant | None = None,
    within_department: bool = False,
) -> CapacityRequest:
    """Approve a request whose pools and tenant the caller locked (with `lock_rows`), and the
    request too unless the caller created it in this transaction. `actor` None: the policy.
    A renewal (`request.extends`) passes its grant, locked too: approving it moves that grant's
    end rather than creating another, so nothing is counted twice. `within_department`: the
    actor is a department admin, bound by the department's quota (locked last)."""
    tenant, pools = locked.tenant, locked.pools
    window = Window(max(request.starts_at, now), request.ends_at)
    if extended is None:
        check_capacity(items, now, pools=pools, window=window)
    before = audit.snapshot(request, REQUEST_FIELDS)
    request.transition("approve")  # re-checked under the lock: no double approval
    if not tenant.is_active:
        raise InvalidTransition(f"{tenant.slug} is {tenant.status}: nothing can be approved")
    if request.ends_at is not None and request.ends_at <= now:
        raise InvalidTransition(f"request #{request.pk} ended before it was approved")
    if extended is None:
        check_ceiling(tenant, items, now, window)
        if tenant.department_id is not None:
            department = departments.lock_department(tenant.department_id)
            if within_department or actor is None:  # its admin, or its teams' envelope
                departments.check_department_quota(department, items, now, window)
    request.auto_approved = actor is None
    request.decided_by = actor
    request.decided_at = now
    request.decision_comment = comment
    request.save()
    if extended is not None:
        _extend_grant_locked(
            actor=actor, tenant=tenant, request=request, grant=extended, pools=pools, now=now
        )
    else:
        where = team_placement(tenant)  # a team's work runs in one place (tenants/placement.py)
        QuotaGrant.objects.bulk_create(
            QuotaGrant(
                placement=where,
                tenant=tenant,
                resource_class=rc,
                amount=n,
                starts_at=max(request.starts_at, now),
                ends_at=request.ends_at,
                request=request,
                created_by=actor,
            )
            for rc, n in items
        )
    audit.record(
        actor=actor,
        verb="capacity_request.approved",
        obj=request,
        tenant=tenant,
        before=before,
        after=audit.snapshot(request, REQUEST_FIELDS),
    )
    request.tenant = tenant
    notify_decided(request)
    notify_desired_state_changed(tenant)
    return request


def _extend_grant_locked(
    *,
    actor,
    tenant: Tenant,
    request: CapacityRequest,
    grant: QuotaGrant,
    pools: Mapping[int, Pool],
    now,
) -> None:
    """Move the end of a grant the caller locked to the renewal's end. The extension is
    checked on its new window, from the grant's end to the renewal's: the pool and the
    tenant's ceiling at every instant of it (another team may have booked the units after
    the grant's old end)."""
    if grant.state != QuotaGrant.State.ACTIVE or (
        grant.ends_at is not None and grant.ends_at <= now
    ):
        raise InvalidTransition(
            f"grant #{grant.pk} ended before its renewal #{request.pk} was approved; "
            "ask for capacity anew"
        )
    if grant.ends_at is None:
        raise InvalidTransition(f"grant #{grant.pk} is open-ended: there is nothing to extend")
    if request.ends_at is None or request.ends_at <= grant.ends_at:
        return  # a later renewal moved it further already: this one changes nothing
    window = Window(max(grant.ends_at, now), request.ends_at)
    kept = [(grant.resource_class, grant.amount)]
    try:
        check_capacity(kept, now, pools=pools, window=window, extending=grant.pk)
    except CapacityExceeded as exc:
        detail = f"the extension of grant #{grant.pk}: {exc.detail}"
        raise CapacityExceeded(detail, field="ends_at") from None
    try:
        check_ceiling(tenant, kept, now, window)
    except QuotaExceeded as exc:
        raise QuotaExceeded(
            f"keeping grant #{grant.pk} {window_words(window)} is above its ceiling: {exc.detail}",
            field="ends_at",
        ) from None
    before = audit.snapshot(grant, ["ends_at"])
    grant.ends_at = request.ends_at
    grant.expiry_warned_at = None  # warn again before the new end
    grant.save(update_fields=["ends_at", "expiry_warned_at"])
    audit.record(
        actor=actor,
        verb="quota_grant.extended",
        obj=grant,
        tenant=grant.tenant,
        before=before,
        after={**audit.snapshot(grant, ["ends_at"]), "renewal": request.pk},
    )
