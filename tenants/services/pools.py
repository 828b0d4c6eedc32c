"""Pools and policy (the platform team): capacity and overcommit of a pool, and the envelope
of asks that are approved without a person."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from core.errors import InvalidInput
from scheduler.catalog.models import Pool, ResourceClass
from tenants import audit, hooks
from tenants.models import AutoApprovalRule
from tenants.permissions import require_platform_admin

POOL_FIELDS = ["capacity", "overcommit_ratio", "source", "borrowing_limit", "lend_idle"]


def set_pool(
    *,
    actor,
    resource_class: ResourceClass,
    capacity: int | None = None,
    overcommit_ratio: Decimal | None = None,
    borrowing_limit: int | None = None,
    lend_idle: bool | None = None,
) -> Pool:
    """Change a pool's capacity, overcommit or cohort policy (borrowing, lending): one audit
    event; the reconciler then writes the new limits into every team's ClusterQueue."""
    require_platform_admin(actor, "change pools")
    if capacity is not None and (isinstance(capacity, bool) or capacity < 0):
        raise InvalidInput("capacity must be a whole number ≥ 0", field="capacity")
    if overcommit_ratio is not None and overcommit_ratio < 0:
        raise InvalidInput("overcommit ratio must be ≥ 0", field="overcommit_ratio")
    if borrowing_limit is not None and (
        isinstance(borrowing_limit, bool)
        or not isinstance(borrowing_limit, int)
        or borrowing_limit < 0
    ):
        raise InvalidInput("borrowing limit must be a whole number ≥ 0", field="borrowing_limit")
    if lend_idle is not None and not isinstance(lend_idle, bool):
        raise InvalidInput("lend_idle must be true or false", field="lend_idle")
    with transaction.atomic():
        pool, _ = Pool.objects.select_for_update().get_or_create(resource_class=resource_class)
        before = audit.snapshot(pool, POOL_FIELDS)
        if capacity is not None:
            pool.capacity = capacity
            pool.source = Pool.Source.MANUAL
        if overcommit_ratio is not None:
            pool.overcommit_ratio = overcommit_ratio
        if borrowing_limit is not None:
            pool.borrowing_limit = borrowing_limit
        if lend_idle is not None:
            pool.lend_idle = lend_idle
        pool.save()
        if (before["borrowing_limit"], before["lend_idle"]) != (
            pool.borrowing_limit,
            pool.lend_idle,
        ):
            # every tenant's queues follow a pool's lending: reconcile all (portal/wiring.py)
            transaction.on_commit(hooks.fleet_policy_changed)
        audit.record(
            actor=actor,
            verb="pool.changed",
            obj=pool,
            tenant=None,
            before=before,
            after=audit.snapshot(pool, POOL_FIELDS),
        )
    return pool


def set_auto_approval_rule(
    *, actor, resource_class: ResourceClass, max_amount: int, max_duration_hours: int
) -> AutoApprovalRule:
    require_platform_admin(actor, "change the approval policy")
    if max_amount < 0 or max_duration_hours < 0:
        raise InvalidInput("limits must be ≥ 0")
    with transaction.atomic():
        rule, created = AutoApprovalRule.objects.select_for_update().get_or_create(
            resource_class=resource_class,
            defaults={"max_amount": max_amount, "max_duration_hours": max_duration_hours},
        )
        before = (
            None
            if created
            else {"max_amount": rule.max_amount, "max_duration_hours": rule.max_duration_hours}
        )
        rule.max_amount, rule.max_duration_hours = max_amount, max_duration_hours
        rule.save()
        audit.record(
            actor=actor,
            verb="policy.changed",
            obj=rule,
            tenant=None,
            before=before,
            after={"max_amount": max_amount, "max_duration_hours": max_duration_hours},
        )
    return rule
