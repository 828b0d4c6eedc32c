"""Reusable reads of the governance core."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Sum
from django.utils import timezone

from scheduler.models import Pool, ResourceClass
from tenants.models import QuotaGrant, Tenant


def effective_quota(tenant: Tenant, now: datetime | None = None) -> dict[int, int]:
    """Resource class id -> units in force now (sum of the tenant's effective grants)."""
    rows = (
        QuotaGrant.objects.effective(now)
        .filter(tenant=tenant)
        .values("resource_class_id")
        .annotate(total=Sum("amount"))
    )
    return {row["resource_class_id"]: row["total"] for row in rows}


def effective_quotas(
    tenant_ids: list[int], now: datetime | None = None
) -> dict[int, dict[int, int]]:
    """tenant id -> {resource class id -> units}, in one query."""
    out: dict[int, dict[int, int]] = defaultdict(dict)
    rows = (
        QuotaGrant.objects.effective(now)
        .filter(tenant_id__in=tenant_ids)
        .values("tenant_id", "resource_class_id")
        .annotate(total=Sum("amount"))
    )
    for row in rows:
        out[row["tenant_id"]][row["resource_class_id"]] = row["total"]
    return out


@dataclass(frozen=True)
class PoolLine:
    resource_class: ResourceClass
    capacity: int
    overcommit_ratio: float
    grantable: int
    granted: int

    @property
    def free(self) -> int:
        return max(0, self.grantable - self.granted)


def pool_summary(now: datetime | None = None) -> list[PoolLine]:
    """Every active class with its capacity, what grants hold and what is free (two queries)."""
    now = now or timezone.now()
    granted = dict(
        QuotaGrant.objects.holding(now)
        .values("resource_class_id")
        .annotate(total=Sum("amount"))
        .values_list("resource_class_id", "total")
    )
    pools = {p.resource_class_id: p for p in Pool.objects.all()}
    lines = []
    for rc in ResourceClass.objects.filter(active=True):
        pool = pools.get(rc.pk)
        lines.append(
            PoolLine(
                resource_class=rc,
                capacity=pool.capacity if pool else 0,
                overcommit_ratio=float(pool.overcommit_ratio) if pool else 1.0,
                grantable=pool.grantable if pool else 0,
                granted=granted.get(rc.pk, 0),
            )
        )
    return lines
