"""Where a team's grants run in a fleet (tenants/placement.py): checked against the clusters
registered, kept the same across a team's grants, changed for all of them at once by the
platform team, audited, and followed by a reconcile that moves its queue."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from core import audit
from core.errors import InvalidInput, InvalidTransition
from core.permissions import require_platform_admin
from tenants import hooks, placement
from tenants.models import QuotaGrant, Tenant
from tenants.services.audit_fields import GRANT_FIELDS
from tenants.services.follow_up import notify_desired_state_changed
from tenants.services.locks import lock_rows


def checked(value: str) -> str:
    """The placement as stored, or a 400 at `placement` that says what to write."""
    try:
        where = placement.parse(value)
    except placement.BadPlacement as exc:
        raise InvalidInput(str(exc), field="placement") from None
    if not where.is_home and (problem := hooks.placement_problem(str(where))):
        raise InvalidInput(problem, field="placement")
    return str(where)


def _held_placement(tenant: Tenant) -> str | None:
    """Where the team's grants that still hold run; None when it holds none."""
    return (
        QuotaGrant.objects.filter(tenant=tenant)
        .holding(timezone.now())
        .values_list("placement", flat=True)
        .first()
    )


def team_placement(tenant: Tenant) -> str:
    """Where the team's grants that still hold run ("" when it holds none: the home cluster)."""
    return _held_placement(tenant) or placement.HOME


def check_same_place(tenant: Tenant, value: str) -> None:
    """A new grant runs where the team's others do: one ClusterQueue, one dispatch."""
    held = _held_placement(tenant)
    current = held or placement.HOME
    if held is not None and value != current:
        raise InvalidInput(
            f"{tenant.slug}'s grants run on {placement.describe(current)}; a team's work runs "
            "in one place (MultiKueue dispatches a whole queue): grant it there, or move the "
            "team first (POST /api/v1/tenants/<slug>/place/)",
            field="placement",
        )


def place_team(*, actor, tenant: Tenant, placement_value: str, comment: str = "") -> int:
    """Move every grant of the team that still holds to `placement_value`; its queue follows
    on the next reconcile (work already admitted keeps running where it is). Returns how many
    grants moved (0: they were there already; nothing is written or audited)."""
    require_platform_admin(actor, "place a team's work on a cluster")
    value = checked(placement_value)
    with transaction.atomic():
        tenant = lock_rows(tenant=tenant.pk).tenant
        if not tenant.is_active:
            raise InvalidTransition(f"{tenant.slug} is {tenant.status}: its grants stay put")
        grants = list(
            QuotaGrant.objects.select_for_update()
            .filter(tenant=tenant)
            .holding(timezone.now())
            .exclude(placement=value)
            .order_by("pk")
        )
        if not grants and not QuotaGrant.objects.filter(tenant=tenant).holding().exists():
            raise InvalidInput(
                f"{tenant.slug} holds no grant to place: grant capacity first (with a placement)",
                field="placement",
            )
        for grant in grants:
            before = audit.snapshot(grant, GRANT_FIELDS)
            grant.placement = value
            grant.save(update_fields=["placement"])
            audit.record(
                actor=actor,
                verb="quota_grant.placed",
                obj=grant,
                tenant=tenant,
                before=before,
                after={**audit.snapshot(grant, GRANT_FIELDS), "comment": comment},
            )
        if grants:
            notify_desired_state_changed(tenant)
    return len(grants)
