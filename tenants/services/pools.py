"""Pools and policy (the platform team): capacity and overcommit of a pool, and the envelope
of asks that are approved without a person."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from core.errors import InvalidInput
from scheduler.catalog.models import Pool, ResourceClass
from tenants import audit
from tenants.models import AutoApprovalRule
from tenants.permissions import require_platform_admin


def set_pool(
    *,
    actor,
    resource_class: ResourceClass,
    capacity: int | None = None,
    overcommit_ratio: Decimal | None = None,
) -> Pool:
    require_platform_admin(actor, "change pools")
    if capacity is not None and (isinstance(capacity, bool) or capacity < 0):
        raise InvalidInput("capacity must be a whole number ≥ 0", field="capacity")
    if overcommit_ratio is not None and overcommit_ratio < 0:
        raise InvalidInput("overcommit ratio must be ≥ 0", field="overcommit_ratio")
    with transaction.atomic():
        pool, _ = Pool.objects.select_for_update().get_or_create(resource_class=resource_class)
        before = audit.snapshot(pool, ["capacity", "overcommit_ratio", "source"])
        if capacity is not None:
            pool.capacity = capacity
            pool.source = Pool.Source.MANUAL
        if overcommit_ratio is not None:
            pool.overcommit_ratio = overcommit_ratio
        pool.save()
        audit.record(
            actor=actor,
            verb="pool.changed",
            obj=pool,
            tenant=None,
            before=before,
            after=audit.snapshot(pool, ["capacity", "overcommit_ratio", "source"]),
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
