"""Renewals: "extend this grant", asked from the grant by an owner or member. A renewal is a
capacity request that carries the grant it extends; inside the policy envelope it is approved
at once, otherwise it waits for the platform team; approving it moves the same grant's end."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from core import bounds
from core.errors import InvalidInput, InvalidTransition
from tenants import policy
from tenants.capacity_time import Window
from tenants.models import CapacityRequest, QuotaGrant
from tenants.permissions import WRITE_ROLES, require_role
from tenants.selectors import RENEWAL_GRANTED, auto_approved_units
from tenants.services import departments
from tenants.services.asks import Ask, file_ask
from tenants.services.capacity import check_horizon
from tenants.services.locks import lock_rows


def automatic_since(grant: QuotaGrant) -> datetime | None:
    """Since when the grant's time has been given without a person deciding: the end a
    platform admin last approved (the grant's first end, or a renewal they approved), or the
    grant's start when an auto-approved ask made it. The policy bounds this whole stretch, so
    renewals one after another cannot keep a grant going without end."""
    renewals = list(
        grant.renewals.filter(state__in=RENEWAL_GRANTED)
        .order_by("ends_at")
        .values("starts_at", "ends_at", "auto_approved")
    )
    decided = [r["ends_at"] for r in renewals if not r["auto_approved"]]
    if decided:
        return decided[-1]
    if grant.request is not None and grant.request.auto_approved:
        return grant.starts_at
    return renewals[0]["starts_at"] if renewals else grant.ends_at


def renewal_decision(grant: QuotaGrant, ends_at: datetime, now: datetime) -> policy.Decision:
    """The policy's answer to extending `grant` to `ends_at`: the time given without a person
    deciding (`automatic_since` to the new end) must fit the class's envelope in length, and
    the grant's units, with what else the team holds through auto-approval at every instant
    of the extension (from the grant's end to the new one), in amount. A team in a
    department gets its department's envelope and rules, as its asks do."""
    tenant, rc = grant.tenant, grant.resource_class
    # the extension's own window: the envelope bounds what is held at every instant of it
    window = Window(max(grant.ends_at or now, now), ends_at)
    # the grant ends where the window starts, so it is not among what is held there: its
    # units are counted once, as the ask's
    held = auto_approved_units(tenant, now, window)
    decision = policy.evaluate(
        [policy.AskedItem(rc.slug, grant.amount, rc.gpu_fraction)],
        starts_at=automatic_since(grant) or now,
        ends_at=ends_at,
        envelopes=departments.team_envelopes(tenant, [rc]),
        held=held,
    )
    return departments.with_department_rules(
        decision, tenant, [(rc, grant.amount)], now, extends=grant, window=window
    )


def submit_grant_renewal(
    *, actor, grant: QuotaGrant, ends_at: datetime | None, justification: str = ""
) -> CapacityRequest:
    """Ask to extend `grant` to `ends_at`. Owners and members may; the renewal is approved at
    once inside the envelope (two audit events, as any ask), else queued for a platform admin."""
    require_role(actor, grant.tenant, WRITE_ROLES, "extend grants")
    now = timezone.now()
    if ends_at is None:
        raise InvalidInput("say until when the grant should be extended", field="ends_at")
    if grant.state != QuotaGrant.State.ACTIVE or (
        grant.ends_at is not None and grant.ends_at <= now
    ):
        raise InvalidTransition(f"grant #{grant.pk} has ended; ask for capacity anew")
    if grant.ends_at is None:
        raise InvalidInput(f"grant #{grant.pk} is open-ended: there is nothing to extend")
    if ends_at <= grant.ends_at:
        passed = "that date has passed: " if ends_at <= now else ""
        raise InvalidInput(
            f"{passed}the new end must be after the grant's end "
            f"({grant.ends_at:%Y-%m-%d %H:%M %Z})",
            field="ends_at",
        )
    check_horizon([grant.resource_class], ends_at, now)
    justification = (
        bounds.text_for(
            (justification or "").strip(),
            CapacityRequest._meta.get_field("justification"),
            "justification",
        )
        or f"extend grant #{grant.pk}"
    )
    with transaction.atomic():
        locked = lock_rows(
            pools=[grant.resource_class_id],
            tenant=grant.tenant_id,
            # its class read with it, and its tenant the locked row: no lazy reads in the lock
            grants=QuotaGrant.objects.filter(pk=grant.pk).select_related("resource_class"),
        )
        tenant, grant = locked.tenant, locked.grants[0]
        grant.tenant = tenant
        if not tenant.is_active:
            raise InvalidInput(f"{tenant.slug} is {tenant.status}: it cannot extend grants")
        if grant.state != QuotaGrant.State.ACTIVE or grant.ends_at is None:
            raise InvalidTransition(f"grant #{grant.pk} has ended; ask for capacity anew")
        if ends_at <= grant.ends_at:  # looked at again: a renewal meanwhile moved the end
            raise InvalidInput(
                f"the new end must be after the grant's end ({grant.ends_at:%Y-%m-%d %H:%M %Z})",
                field="ends_at",
            )
        decision = renewal_decision(grant, ends_at, now)
        ask = Ask([(grant.resource_class, grant.amount)], grant.ends_at, ends_at, justification)
        return file_ask(
            actor=actor, locked=locked, ask=ask, decision=decision, now=now, extends=grant
        )
