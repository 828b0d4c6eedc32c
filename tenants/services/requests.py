"""Capacity requests: the live preview and the life of a request (submit, reject, cancel, mark
provisioned, expire). The capacity check is `tenants.services.capacity`'s, approving
`tenants.services.approvals`'s."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core import audit, bounds
from core.errors import InvalidInput
from tenants import policy
from tenants.capacity_time import Window
from tenants.models import CapacityRequest, QuotaGrant, Tenant
from tenants.permissions import OWNER_ROLES, WRITE_ROLES, require_role
from tenants.selectors import auto_approved_units
from tenants.services import departments
from tenants.services.approvals import decision_comment, notify_decided
from tenants.services.asks import Ask, file_ask
from tenants.services.audit_fields import REQUEST_FIELDS
from tenants.services.capacity import (
    check_capacity,
    check_ceiling,
    check_dates,
    check_horizon,
    free_capacity,
    resolve_items,
)
from tenants.services.follow_up import notify_desired_state_changed
from tenants.services.locks import lock_rows


def _policy_decision(tenant: Tenant, items, window: Window, now: datetime) -> policy.Decision:
    """The auto-approval policy's answer to this ask of `tenant`, its department's rules
    included. Made under the tenant's row lock (see `submit_capacity_request`), what the
    tenant holds through auto-approval cannot change until the ask is approved or left to a
    human."""
    classes = [rc for rc, _ in items]
    decision = policy.evaluate(
        [policy.AskedItem(rc.slug, n, rc.gpu_fraction) for rc, n in items],
        starts_at=window.starts_at,
        ends_at=window.ends_at,
        envelopes=departments.team_envelopes(tenant, classes),
        held=auto_approved_units(tenant, now, window),
    )
    return departments.with_department_rules(decision, tenant, items, now, window=window)


def preview_capacity_request(*, tenant: Tenant, items: Mapping, starts_at=None, ends_at=None):
    """What would happen to this ask (for the form's live hint): the refusals
    `submit_capacity_request` would raise (the same checks, read without locks), else the
    policy decision and the units free at every instant of the asked window, by class."""
    now = timezone.now()
    starts_at = starts_at or now
    if not tenant.is_active:
        raise InvalidInput(f"{tenant.slug} is {tenant.status}: it cannot ask for capacity")
    check_dates(starts_at, ends_at, now)
    resolved = resolve_items(items)
    check_horizon([rc for rc, _ in resolved], ends_at, now, starts_at=starts_at)
    window = Window(max(starts_at, now), ends_at)
    check_capacity(resolved, now, window=window)
    check_ceiling(tenant, resolved, now, window)
    decision = _policy_decision(tenant, resolved, window, now)
    return decision, {rc.slug: free_capacity(rc, now, window) for rc, _ in resolved}


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
    """Ask for capacity from `starts_at` (now when None; later books ahead) until `ends_at`.
    Every limit is checked at every instant of that window. Inside the policy envelope it is
    approved at once, in the same transaction (two audit events: submitted, then approved by
    the system); otherwise it waits for a platform admin."""
    require_role(actor, tenant, WRITE_ROLES, "ask for capacity")
    tenant.refresh_from_db(fields=["status"])
    if not tenant.is_active:
        raise InvalidInput(f"{tenant.slug} is {tenant.status}: it cannot ask for capacity")
    now = timezone.now()
    starts_at = starts_at or now
    check_dates(starts_at, ends_at, now)
    if not (justification or "").strip():
        raise InvalidInput("say why the team needs this capacity", field="justification")
    justification = bounds.text_for(
        justification, CapacityRequest._meta.get_field("justification"), "justification"
    )
    resolved = resolve_items(items)
    check_horizon([rc for rc, _ in resolved], ends_at, now, starts_at=starts_at)
    window = Window(max(starts_at, now), ends_at)

    with transaction.atomic():
        # Pools, then the tenant (the order of `lock_rows`, as an approval takes them): two asks
        # of one team cannot both see the envelope or the ceiling free and both pass it.
        locked = lock_rows(pools=[rc.pk for rc, _ in resolved], tenant=tenant)
        tenant = locked.tenant
        if not tenant.is_active:
            raise InvalidInput(f"{tenant.slug} is {tenant.status}: it cannot ask for capacity")
        check_capacity(resolved, now, pools=locked.pools, window=window)
        check_ceiling(tenant, resolved, now, window)
        decision = _policy_decision(tenant, resolved, window, now)
        ask = Ask(resolved, starts_at, ends_at, justification.strip())
        return file_ask(actor=actor, locked=locked, ask=ask, decision=decision, now=now)


def _decide(*, actor, request: CapacityRequest, action: str, comment: str) -> CapacityRequest:
    comment = decision_comment(comment)
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
            notify_desired_state_changed(request.tenant)
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
    """A platform admin, or an admin of the team's department."""
    tenant = Tenant.objects.select_related("department").get(pk=request.tenant_id)
    departments.require_approver(actor, tenant, "reject capacity requests")
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
        return system_transition(request, "provision")


def system_transition(request: CapacityRequest | int, action: str) -> CapacityRequest:
    """A move the system makes (provision, expire) under a lock, once: when the request has
    moved on meanwhile, nothing happens. Call inside a transaction."""
    return system_transition_locked(lock_rows(request=request).request, action)


def system_transition_locked(request: CapacityRequest, action: str) -> CapacityRequest:
    """`system_transition` of a request the caller has locked already (with `lock_rows`)."""
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
