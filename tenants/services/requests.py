"""Capacity requests: validation and the capacity check, the live preview, and the life of a
request (submit, approve, reject, cancel, mark provisioned)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from core.errors import CapacityExceeded, InvalidInput, InvalidTransition, QuotaExceeded
from scheduler.catalog.models import Pool, ResourceClass
from tenants import audit, policy
from tenants.models import (
    AutoApprovalRule,
    CapacityRequest,
    CapacityRequestItem,
    QuotaGrant,
    Tenant,
)
from tenants.notifications import notify
from tenants.permissions import OWNER_ROLES, WRITE_ROLES, require_platform_admin, require_role
from tenants.selectors import auto_approved_units
from tenants.services._common import REQUEST_FIELDS, _notify_desired_state_changed, portal_url
from tenants.services.locks import lock_rows

# --- validation and the capacity check -------------------------------------------------------


def _resolve_items(items: Mapping) -> list[tuple[ResourceClass, int]]:
    if not items:
        raise InvalidInput("ask for at least one resource class", field="items")
    resolved: list[tuple[ResourceClass, int]] = []
    slugs = [k.slug if isinstance(k, ResourceClass) else str(k) for k in items]
    known = {rc.slug: rc for rc in ResourceClass.objects.filter(slug__in=slugs, active=True)}
    for key, amount in items.items():
        slug = key.slug if isinstance(key, ResourceClass) else str(key)
        if slug not in known:
            raise InvalidInput(
                f"unknown resource class {slug!r}; see /api/v1/resource-classes/", field="items"
            )
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise InvalidInput(f"{slug}: amount must be a whole number", field="items")
        if amount <= 0:
            raise InvalidInput(f"{slug}: amount must be at least 1, not {amount}", field="items")
        resolved.append((known[slug], amount))
    return resolved


def _check_dates(starts_at: datetime, ends_at: datetime | None, now: datetime) -> None:
    if starts_at < now - timedelta(minutes=5):
        raise InvalidInput("start must not be in the past", field="starts_at")
    if ends_at is not None:
        if ends_at <= now:
            raise InvalidInput("end must be in the future", field="ends_at")
        if ends_at <= starts_at:
            raise InvalidInput("end must be after the start", field="ends_at")


def _granted(resource_class_id: int, now: datetime) -> int:
    total = (
        QuotaGrant.objects.holding(now)
        .filter(resource_class_id=resource_class_id)
        .aggregate(total=Sum("amount"))["total"]
    )
    return total or 0


def free_capacity(resource_class: ResourceClass, now: datetime | None = None) -> int:
    """Units approvals may still hand out (read without a lock: for display and early checks)."""
    pool = Pool.objects.filter(resource_class=resource_class).first()
    grantable = pool.grantable if pool else 0
    return max(0, grantable - _granted(resource_class.pk, now or timezone.now()))


def _tenant_gpu_equivalents(tenant: Tenant, now: datetime) -> Decimal:
    total = Decimal(0)
    rows = (
        QuotaGrant.objects.holding(now)
        .filter(tenant=tenant)
        .values("resource_class__gpu_fraction")
        .annotate(n=Sum("amount"))
    )
    for row in rows:
        total += row["resource_class__gpu_fraction"] * row["n"]
    return total


def _plain(number: Decimal) -> Decimal:
    """12.00 as 12, 0.50 as 0.5: how a message shows a number read from a decimal column."""
    return number.quantize(Decimal(1)) if number == number.to_integral() else number.normalize()


def _check_ceiling(tenant: Tenant, items: list[tuple[ResourceClass, int]], now: datetime) -> None:
    """Refuse what would take the tenant above its ceiling: its own, or the platform's default
    where it has none (`Tenant.effective_gpu_ceiling`)."""
    ceiling = tenant.effective_gpu_ceiling
    held = _tenant_gpu_equivalents(tenant, now)
    asked = sum((rc.gpu_fraction * n for rc, n in items), Decimal(0))
    if held + asked > ceiling:
        room = _plain(max(Decimal(0), ceiling - held))
        ceiling, held, asked = _plain(ceiling), _plain(held), _plain(asked)
        if tenant.gpu_ceiling is None:
            whose = " (the platform's default ceiling)"
            fix = f"ask the platform team to set a ceiling for {tenant.slug}"
        else:
            whose, fix = "", f"ask the platform team to raise {tenant.slug}'s ceiling"
        raise QuotaExceeded(
            f"{tenant.slug} may hold at most {ceiling:g} GPU-equivalents{whose}; it holds "
            f"{held:g} and this asks for {asked:g} more (room left: {room:g}); ask for less, "
            f"or {fix}",
            field="items",
        )


def _check_capacity(
    items: list[tuple[ResourceClass, int]],
    now: datetime,
    *,
    pools: Mapping[int, Pool] | None = None,
) -> None:
    """Refuse when any class would be granted beyond capacity × overcommit. Pass the pools
    that `lock_rows` locked (first, in resource-class order) and the check holds until the
    transaction commits, so concurrent approvals serialise; without them it reads the pools
    unlocked (an early check, made again under the locks)."""
    if pools is None:
        ids = sorted(rc.pk for rc, _ in items)
        pools = {p.resource_class_id: p for p in Pool.objects.filter(resource_class_id__in=ids)}
    for rc, amount in sorted(items, key=lambda i: i[0].pk):
        pool = pools.get(rc.pk)
        grantable = pool.grantable if pool else 0
        free = max(0, grantable - _granted(rc.pk, now))
        if amount > free:
            raise CapacityExceeded(
                f"{rc.slug}: asked for {amount} but only {free} of {grantable} can still be "
                f"granted; ask for {free} or fewer, or ask the platform team for more capacity",
                field="items",
            )


def _policy_decision(tenant: Tenant, items, starts_at, ends_at, now: datetime) -> policy.Decision:
    """The auto-approval policy's answer to this ask of `tenant`. Made under the tenant's row
    lock (see `submit_capacity_request`), what the tenant holds through auto-approval cannot
    change until the ask is approved or left to a human."""
    rules = {
        r.resource_class.slug: policy.Envelope(r.max_amount, r.max_duration_hours)
        for r in AutoApprovalRule.objects.filter(
            resource_class__in=[rc for rc, _ in items]
        ).select_related("resource_class")
    }
    asked = [policy.AskedItem(rc.slug, n, rc.gpu_fraction) for rc, n in items]
    return policy.evaluate(
        asked,
        starts_at=starts_at,
        ends_at=ends_at,
        envelopes=rules,
        held=auto_approved_units(tenant, now),
    )


def preview_capacity_request(*, tenant: Tenant, items: Mapping, starts_at=None, ends_at=None):
    """What would happen to this ask (for the form's live hint): the refusals
    `submit_capacity_request` would raise (the same checks, read without locks), else the
    policy decision and free units."""
    now = timezone.now()
    starts_at = starts_at or now
    if not tenant.is_active:
        raise InvalidInput(f"{tenant.slug} is {tenant.status}: it cannot ask for capacity")
    _check_dates(starts_at, ends_at, now)
    resolved = _resolve_items(items)
    _check_capacity(resolved, now)
    _check_ceiling(tenant, resolved, now)
    decision = _policy_decision(tenant, resolved, starts_at, ends_at, now)
    return decision, {rc.slug: free_capacity(rc, now) for rc, _ in resolved}


# --- capacity requests ----------------------------------------------------------------------


def submit_capacity_request(
    *,
    actor,
    tenant: Tenant,
    items: Mapping,
    ends_at: datetime | None,
    justification: str,
    starts_at: datetime | None = None,
) -> CapacityRequest:
    """Ask for capacity. Inside the policy envelope it is approved at once, in the same
    transaction (two audit events: submitted, then approved by the system); otherwise it waits
    for a platform admin."""
    require_role(actor, tenant, WRITE_ROLES, "ask for capacity")
    tenant.refresh_from_db(fields=["status"])
    if not tenant.is_active:
        raise InvalidInput(f"{tenant.slug} is {tenant.status}: it cannot ask for capacity")
    now = timezone.now()
    starts_at = starts_at or now
    _check_dates(starts_at, ends_at, now)
    if not (justification or "").strip():
        raise InvalidInput("say why the team needs this capacity", field="justification")
    resolved = _resolve_items(items)

    with transaction.atomic():
        # Pools, then the tenant (the order of `lock_rows`, as an approval takes them): two asks
        # of one team cannot both see the envelope or the ceiling free and both pass it.
        locked = lock_rows(pools=[rc.pk for rc, _ in resolved], tenant=tenant)
        tenant = locked.tenant
        if not tenant.is_active:
            raise InvalidInput(f"{tenant.slug} is {tenant.status}: it cannot ask for capacity")
        _check_capacity(resolved, now, pools=locked.pools)
        _check_ceiling(tenant, resolved, now)
        decision = _policy_decision(tenant, resolved, starts_at, ends_at, now)
        request = CapacityRequest.objects.create(
            tenant=tenant,
            requester=actor,
            starts_at=starts_at,
            ends_at=ends_at,
            justification=justification.strip(),
            policy_reasons=decision.reasons,
        )
        CapacityRequestItem.objects.bulk_create(
            CapacityRequestItem(request=request, resource_class=rc, amount=n) for rc, n in resolved
        )
        audit.record(
            actor=actor,
            verb="capacity_request.submitted",
            obj=request,
            tenant=tenant,
            after={
                **audit.snapshot(request, REQUEST_FIELDS),
                "items": {rc.slug: n for rc, n in resolved},
                "policy": "auto-approve" if decision.auto_approve else decision.reasons,
            },
        )
        if decision.auto_approve:
            request = _approve_locked(
                actor=None,
                tenant=tenant,
                request=request,
                items=resolved,
                pools=locked.pools,
                comment="auto-approved by policy",
                now=now,
            )
        else:
            notify_submitted(request, {rc.slug: n for rc, n in resolved})
    return request


def notify_submitted(request: CapacityRequest, items: dict[str, int]) -> None:
    """Tell the approvers that an ask waits for them (in the submitting transaction)."""
    asked = ", ".join(f"{n} × {slug}" for slug, n in items.items())
    what = f"extend grant #{request.extends_id}" if request.extends_id else "capacity"
    notify(
        "capacity_request.submitted",
        request.tenant,
        subject=f"[GPU Portal] {request.tenant.slug} asks for {what}: request #{request.pk}",
        text=(
            f"{request.requester.get_username()} of {request.tenant.slug} asks for {asked} "
            f"until {_when(request.ends_at)}: {request.justification}\n"
            f"Why it needs a person: {'; '.join(request.policy_reasons) or 'policy'}\n"
            f"{portal_url('tenants:request_detail', request.pk)}"
        ),
        data={"request": request.pk, "items": items, "extends": request.extends_id},
    )


def _when(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M %Z}" if at else "further notice (open-ended)"


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


def approve_capacity_request(
    *, actor, request: CapacityRequest, comment: str = ""
) -> CapacityRequest:
    require_platform_admin(actor, "approve capacity requests")
    return _approve(actor=actor, request=request, comment=comment)


def _approve(*, actor, request: CapacityRequest, comment: str) -> CapacityRequest:
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
        return _approve_locked(
            actor=actor,
            tenant=locked.tenant,
            request=locked.request,
            items=items,
            pools=locked.pools,
            comment=comment,
            now=now,
            extended=locked.grants[0] if extends_id else None,
        )


def _approve_locked(
    *,
    actor,
    tenant: Tenant,
    request: CapacityRequest,
    items: list[tuple[ResourceClass, int]],
    pools: Mapping[int, Pool],
    comment: str,
    now: datetime,
    extended: QuotaGrant | None = None,
) -> CapacityRequest:
    """Approve a request whose pools and tenant the caller locked (with `lock_rows`), and the
    request too unless the caller created it in this transaction. `actor` None: the policy.
    A renewal (`request.extends`) passes its grant, locked too: approving it moves that grant's
    end rather than creating another, so nothing is counted twice."""
    if extended is None:
        _check_capacity(items, now, pools=pools)
    before = audit.snapshot(request, REQUEST_FIELDS)
    request.transition("approve")  # re-checked under the lock: no double approval
    if not tenant.is_active:
        raise InvalidTransition(f"{tenant.slug} is {tenant.status}: nothing can be approved")
    if request.ends_at is not None and request.ends_at <= now:
        raise InvalidTransition(f"request #{request.pk} ended before it was approved")
    if extended is None:
        _check_ceiling(tenant, items, now)
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
        QuotaGrant.objects.bulk_create(
            QuotaGrant(
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
    _notify_desired_state_changed(tenant)
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
    """Move the end of a grant the caller locked to the renewal's end. The grant's units are
    counted once, before and after (a grant holds capacity until it ends, wherever its end
    lies), so no capacity is added; only a pool already over-committed (its capacity lowered
    since) refuses to keep it longer."""
    if grant.state != QuotaGrant.State.ACTIVE or (
        grant.ends_at is not None and grant.ends_at <= now
    ):
        raise InvalidTransition(
            f"grant #{grant.pk} ended before its renewal #{request.pk} was approved; "
            "ask for capacity anew"
        )
    if grant.ends_at is None:
        raise InvalidTransition(f"grant #{grant.pk} is open-ended: there is nothing to extend")
    pool = pools.get(grant.resource_class_id)
    grantable = pool.grantable if pool else 0
    granted = _granted(grant.resource_class_id, now)
    if granted > grantable:
        raise CapacityExceeded(
            f"{grant.resource_class}: {granted} units are granted but only {grantable} can be "
            "since the pool shrank; the platform team must free capacity before this grant "
            "is extended",
            field="ends_at",
        )
    if request.ends_at is None or request.ends_at <= grant.ends_at:
        return  # a later renewal moved it further already: this one changes nothing
    held, ceiling = _tenant_gpu_equivalents(tenant, now), tenant.effective_gpu_ceiling
    if held > ceiling:  # the ceiling was lowered since: keeping more longer is not extending
        raise QuotaExceeded(
            f"{tenant.slug} holds {_plain(held):g} GPU-equivalents, above its ceiling of "
            f"{_plain(ceiling):g} (lowered since it was granted): a grant is extended only "
            f"within the ceiling; let other grants end first, or ask the platform team to "
            f"raise {tenant.slug}'s ceiling",
            field="ends_at",
        )
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


def _decide(*, actor, request: CapacityRequest, action: str, comment: str) -> CapacityRequest:
    with transaction.atomic():
        # Tenant, request, then the grants it holds: the order of the expiry, so no deadlock.
        holds = Q(request_id=request.pk)
        if request.extends_id:
            holds |= Q(pk=request.extends_id)
        locked = lock_rows(
            tenant=request.tenant_id,
            request=request,
            grants=QuotaGrant.objects.filter(holds, state=QuotaGrant.State.ACTIVE),
        )
        request = locked.request
        before = audit.snapshot(request, REQUEST_FIELDS)
        was_holding = request.state in (
            CapacityRequest.State.APPROVED,
            CapacityRequest.State.PROVISIONED,
        )
        request.transition(action)
        request.decided_by = actor
        request.decided_at = timezone.now()
        request.decision_comment = comment
        request.save()
        if was_holding:
            for grant in locked.grants:
                if grant.pk == request.extends_id:
                    _undo_extension(actor, request, grant, request.decided_at)
                    continue
                grant.end(QuotaGrant.State.REVOKED, request.decided_at)
                grant.save(update_fields=["state", "ended_at"])
            _notify_desired_state_changed(request.tenant)
        audit.record(
            actor=actor,
            verb=f"capacity_request.{request.state}",
            obj=request,
            tenant=request.tenant,
            before=before,
            after=audit.snapshot(request, REQUEST_FIELDS),
        )
        if request.state == CapacityRequest.State.REJECTED:
            notify_decided(request)
    return request


def _undo_extension(actor, request: CapacityRequest, grant: QuotaGrant, now: datetime) -> None:
    """A renewal given back: its grant ends where it ended before (or now, if that has
    passed, for the expiry to pick it up)."""
    if grant.ends_at is None or grant.ends_at != request.ends_at:
        return  # another renewal moved it since: that one's end stands
    before = audit.snapshot(grant, ["ends_at"])
    grant.ends_at = max(request.starts_at, now)
    grant.save(update_fields=["ends_at"])
    audit.record(
        actor=actor,
        verb="quota_grant.extension_withdrawn",
        obj=grant,
        tenant=request.tenant,
        before=before,
        after={**audit.snapshot(grant, ["ends_at"]), "renewal": request.pk},
    )


def reject_capacity_request(*, actor, request: CapacityRequest, comment: str) -> CapacityRequest:
    require_platform_admin(actor, "reject capacity requests")
    if not (comment or "").strip():
        raise InvalidInput("say why the request is rejected", field="comment")
    return _decide(actor=actor, request=request, action="reject", comment=comment)


def cancel_capacity_request(
    *, actor, request: CapacityRequest, comment: str = ""
) -> CapacityRequest:
    """The requester, an owner or a platform admin withdraws an ask or gives capacity back."""
    if request.requester_id != getattr(actor, "pk", None):
        require_role(actor, request.tenant, OWNER_ROLES, "cancel another member's request")
    return _decide(actor=actor, request=request, action="cancel", comment=comment)


def mark_request_provisioned(*, request: CapacityRequest) -> CapacityRequest:
    """The reconciler put the approved capacity on the cluster."""
    with transaction.atomic():
        return _system_transition(request, "provision")


def _system_transition(request: CapacityRequest | int, action: str) -> CapacityRequest:
    """A move the system makes (provision, expire) under a lock, once: when the request has
    moved on meanwhile, nothing happens. Call inside a transaction."""
    return _system_transition_locked(lock_rows(request=request).request, action)


def _system_transition_locked(request: CapacityRequest, action: str) -> CapacityRequest:
    """`_system_transition` of a request the caller has locked already (with `lock_rows`)."""
    if not request.can(action):
        return request
    before = audit.snapshot(request, ["state"])
    request.transition(action)
    request.save(update_fields=["state", "updated_at"])
    audit.record(
        actor=None,
        verb=f"capacity_request.{request.state}",
        obj=request,
        tenant=request.tenant,
        before=before,
        after=audit.snapshot(request, ["state"]),
    )
    return request
