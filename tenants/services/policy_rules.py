"""The approval policy (the platform team): per resource class, the envelope of asks that are
approved without a person."""

from __future__ import annotations

from django.db import transaction

from catalog.models import ResourceClass
from core import audit
from core.errors import InvalidInput
from core.permissions import require_platform_admin
from tenants.models import AutoApprovalRule


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
