"""The tail of every ask, new or a renewal: once the caller has checked it and taken its locks
(pools, then tenant, then the grant a renewal extends: `tenants.services.locks`), the request
and its items are written with one audit event, and the ask is approved at once when the policy
says so, or put before the approvers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from catalog.models import ResourceClass
from core import audit
from tenants import policy
from tenants.models import CapacityRequest, CapacityRequestItem, QuotaGrant
from tenants.notifications import notify
from tenants.services.approvals import approve_locked
from tenants.services.audit_fields import REQUEST_FIELDS
from tenants.services.follow_up import portal_url
from tenants.services.locks import LockedRows


@dataclass(frozen=True)
class Ask:
    """What a team asks for, checked: units of resource classes, from when until when, and why."""

    items: list[tuple[ResourceClass, int]]
    starts_at: datetime
    ends_at: datetime | None
    justification: str


def file_ask(
    *,
    actor,
    locked: LockedRows,
    ask: Ask,
    decision: policy.Decision,
    now: datetime,
    extends: QuotaGrant | None = None,
) -> CapacityRequest:
    """Write down an ask the caller checked under its locks (the tenant and the pools as
    `lock_rows` returned them, `extends` locked too): the request, its items and the audit
    event `capacity_request.submitted`. Inside the policy envelope (`decision`) it is approved
    at once in the same transaction (a second audit event); otherwise the approvers are told.
    A renewal passes the grant it `extends`: approving it moves that grant's end."""
    tenant, items = locked.tenant, ask.items
    request = CapacityRequest.objects.create(
        tenant=tenant,
        requester=actor,
        starts_at=ask.starts_at,
        ends_at=ask.ends_at,
        justification=ask.justification,
        policy_reasons=decision.reasons,
        extends=extends,
    )
    CapacityRequestItem.objects.bulk_create(
        CapacityRequestItem(request=request, resource_class=rc, amount=n) for rc, n in items
    )
    asked = {rc.slug: n for rc, n in items}
    audit.record(
        actor=actor,
        verb="capacity_request.submitted",
        obj=request,
        tenant=tenant,
        after={
            **audit.snapshot(request, REQUEST_FIELDS),
            **({"extends": extends.pk} if extends is not None else {}),
            "items": asked,
            "policy": "auto-approve" if decision.auto_approve else decision.reasons,
        },
    )
    if decision.auto_approve:
        return approve_locked(
            actor=None,
            locked=locked,
            request=request,
            items=items,
            comment="auto-approved by policy",
            now=now,
            extended=extends,
        )
    notify_submitted(request, asked)
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
