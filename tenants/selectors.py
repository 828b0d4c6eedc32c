"""Reusable reads of the governance core: the one place each number is computed, so that the
pages, the API and the CLI show the same quota lines, pools and tokens."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q, Sum
from django.utils import timezone

from catalog import slices
from catalog.models import Pool, ResourceClass
from tenants import capacity_time, hooks
from tenants.capacity_time import Window
from tenants.models import CapacityRequest, QuotaGrant, Tenant


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


def granted_totals(now: datetime | None = None) -> dict[int, int]:
    """resource class id -> units granted to all tenants together, in one query."""
    rows = (
        QuotaGrant.objects.effective(now)
        .values("resource_class_id")
        .annotate(total=Sum("amount"))
        .order_by()
    )
    return {row["resource_class_id"]: row["total"] for row in rows}


@dataclass(frozen=True)
class QuotaLine:
    """A team's line of one class: `granted`; `in_use`, what its admitted work holds of the
    quota (Kueue's count: what is no longer free to admit); `running`, what of that runs now,
    pods placed on nodes (issue 49, 4: "in use" on a page is what runs); `model_slices`, the
    team's grant of the class's GPU model in compute slices, the "of Y slices" of the words."""

    resource_class: ResourceClass
    granted: int
    in_use: int
    running: int = 0
    model_slices: int = 0

    @property
    def free(self) -> int:
        return max(0, self.granted - self.in_use)

    @property
    def waiting_for_nodes(self) -> int:
        """Units admitted on quota whose pods are not running yet (placed nowhere, starting)."""
        return max(0, self.in_use - self.running)

    def _words(self, units: int) -> str:
        return slices.units_in_slices(units, self.resource_class, self.model_slices or None)

    @property
    def granted_words(self) -> str:
        return self._words(self.granted)

    @property
    def running_words(self) -> str:
        return self._words(self.running)

    @property
    def free_words(self) -> str:
        return self._words(self.free)

    @property
    def summary(self) -> str:
        """`4 × 3g.40gb (= 12 of 26 slices) granted; 1 × 3g.40gb (= 3 of 26 slices) running;
        3 × 3g.40gb (= 9 of 26 slices) unused`, with what is admitted but not running yet."""
        admitted = self.waiting_for_nodes
        return (
            f"{self.granted_words} granted; {self.running_words} running"
            + (f" (+ {admitted} admitted, not running yet)" if admitted else "")
            + f"; {self.free_words} unused"
        )


def quota_lines_for(tenant_ids: list[int]) -> dict[int, list[QuotaLine]]:
    """tenant id -> granted, in use and free per resource class the tenant holds a grant of or
    uses (a class in use but no longer granted shows with 0 granted), ordered by slug. Three
    queries for any number of tenants: the one read model of quota lines."""
    granted = effective_quotas(tenant_ids)
    # what pods hold, and what runs on nodes now: the workloads' and the inventory's answer
    used, running = hooks.workload_usage(tenant_ids)
    wanted_pks = {pk for lines in granted.values() for pk in lines}
    wanted_slugs = {slug for lines in used.values() for slug in lines} | {
        slug for lines in running.values() for slug in lines
    }
    classes = list(
        (
            ResourceClass.objects.filter(pk__in=wanted_pks)
            | ResourceClass.objects.filter(slug__in=wanted_slugs)
        )
        .select_related("pool")  # the team page weighs quota against the pool's capacity
        .order_by("slug")
    )
    out: dict[int, list[QuotaLine]] = {}
    for tenant_id in tenant_ids:
        g, u = granted.get(tenant_id, {}), used.get(tenant_id, {})
        r = running.get(tenant_id, {})
        mine = [rc for rc in classes if rc.pk in g or rc.slug in u or rc.slug in r]
        by_model: dict[str, int] = defaultdict(int)  # the team's grant of each model in slices
        for rc in mine:
            by_model[rc.gpu_model] += g.get(rc.pk, 0) * slices.slices_per_unit(rc)
        out[tenant_id] = [
            QuotaLine(
                rc,
                g.get(rc.pk, 0),
                u.get(rc.slug, 0),
                running=r.get(rc.slug, 0),
                model_slices=by_model[rc.gpu_model],
            )
            for rc in mine
        ]
    return out


@dataclass(frozen=True)
class SliceLine:
    """One GPU model's grants and use in compute slices (GPU_QUOTA_UNIT=slices), with what
    holds them: "12 of 14 A100-80GB slices in use: 1 × 3g.40gb, 4 × 1g.10gb, 1 whole GPU"."""

    gpu_model: str
    granted: int
    in_use: int
    held: tuple[tuple[ResourceClass, int], ...]  # (class, units in use), most slices first

    @property
    def free(self) -> int:
        return max(0, self.granted - self.in_use)

    @property
    def summary(self) -> str:
        held = ", ".join(f"{units} × {shape_name(rc)}" for rc, units in self.held)
        return (
            f"{self.in_use} of {self.granted} {self.gpu_model} slices in use"
            + (f": {held}" if held else "")
            + f" ({slices.describe(self.granted)} granted)"
        )


def shape_name(rc: ResourceClass) -> str:
    """A class as a shape: "3g.40gb", "whole GPU", "shared replica"."""
    return slices.shape(rc)


def slice_lines(lines: list[QuotaLine]) -> list[SliceLine]:
    """A tenant's quota lines folded per GPU model into slices (pure over the lines)."""
    by_model: dict[str, list[QuotaLine]] = defaultdict(list)
    for line in lines:
        by_model[line.resource_class.gpu_model].append(line)
    out = []
    for model in sorted(by_model):
        group = by_model[model]
        held = sorted(
            ((line.resource_class, line.in_use) for line in group if line.in_use),
            key=lambda pair: (-slices.slices_per_unit(pair[0]) * pair[1], pair[0].slug),
        )
        out.append(
            SliceLine(
                gpu_model=model,
                granted=sum(x.granted * slices.slices_per_unit(x.resource_class) for x in group),
                in_use=sum(x.in_use * slices.slices_per_unit(x.resource_class) for x in group),
                held=tuple(held),
            )
        )
    return out


def quota_lines(tenant: Tenant) -> list[QuotaLine]:
    return quota_lines_for([tenant.pk])[tenant.pk]


# A renewal's states once it was granted (it moved its grant's end).
RENEWAL_GRANTED = (CapacityRequest.State.APPROVED, CapacityRequest.State.PROVISIONED)


def auto_renewed_grant_ids():
    """Grants whose end an auto-approved renewal moved (a subquery)."""
    return CapacityRequest.objects.filter(
        auto_approved=True, state__in=RENEWAL_GRANTED, extends__isnull=False
    ).values("extends_id")


def auto_approved_units(
    tenant: Tenant, now: datetime | None = None, window: Window | None = None
) -> dict[str, int]:
    """resource class slug -> the most units the tenant holds at any instant of `window`
    (from now on when none) in grants that came from auto-approved requests, or that
    auto-approved renewals kept going: what the auto-approval envelope bounds, at every
    instant, together with a new ask."""
    window = window or Window(now or timezone.now())
    qs = (
        QuotaGrant.objects.filter(tenant=tenant, state=QuotaGrant.State.ACTIVE)
        .filter(Q(ends_at__isnull=True) | Q(ends_at__gt=window.starts_at))
        .filter(Q(request__auto_approved=True) | Q(pk__in=auto_renewed_grant_ids()))
    )
    if window.ends_at is not None:
        qs = qs.filter(starts_at__lt=window.ends_at)
    rows = qs.order_by().values_list("resource_class__slug", "amount", "starts_at", "ends_at")
    holds = [capacity_time.Hold(slug, n, s, e) for slug, n, s, e in rows]
    return {
        str(slug): int(peak)
        for slug, peak in capacity_time.peaks(holds, window.starts_at, window.ends_at).items()
    }


# --- pools -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolLine:
    resource_class: ResourceClass
    capacity: int
    overcommit_ratio: float
    grantable: int
    granted: int
    outside_use: int = 0  # units pods outside the teams hold (not in capacity)
    outside_namespaces: dict[str, int] = field(default_factory=dict)

    @property
    def free(self) -> int:
        return max(0, self.grantable - self.granted)

    @property
    def shortfall(self) -> int:
        """Units granted beyond what may be: the pool shrank under grants already made (use
        outside the portal grew, a node left). The grants stand; new asks are refused."""
        return max(0, self.granted - self.grantable)

    @property
    def offered(self) -> int:
        return self.capacity + self.outside_use

    @property
    def capacity_words(self) -> str:
        return slices.units_in_slices(self.capacity, self.resource_class)

    @property
    def granted_words(self) -> str:
        return slices.units_in_slices(self.granted, self.resource_class)

    @property
    def free_words(self) -> str:
        return slices.units_in_slices(self.free, self.resource_class)

    @property
    def outside_said(self) -> str:
        """`serving (2), ml-ops (1)`: the namespaces using it outside the portal."""
        return ", ".join(f"{ns} ({n})" for ns, n in sorted(self.outside_namespaces.items()))


def pooled_class_slugs() -> set[str]:
    """Slugs of the active classes a pool has units of: what can be asked for at all."""
    return set(
        ResourceClass.objects.filter(active=True, pool__capacity__gt=0).values_list(
            "slug", flat=True
        )
    )


def pool_summary(now: datetime | None = None) -> list[PoolLine]:
    """Every active class with its capacity, the most its grants hold at any instant from now
    on (bookings counted where they overlap, not summed: issue 52) and what is free (three
    queries)."""
    now = now or timezone.now()
    rows = (
        QuotaGrant.objects.holding(now)
        .order_by()
        .values_list("resource_class_id", "amount", "starts_at", "ends_at")
    )
    holds = [capacity_time.Hold(rc, n, max(s, now), e) for rc, n, s, e in rows]
    granted = {k: int(v) for k, v in capacity_time.peaks(holds, now, None).items()}
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
                outside_use=pool.outside_use if pool else 0,
                outside_namespaces=dict(pool.outside_namespaces or {}) if pool else {},
            )
        )
    return lines


def active_namespaces() -> set[str]:
    """The namespaces of the teams that are active: where work may come, by any door."""
    return {
        tenant.namespace
        for tenant in Tenant.objects.filter(status=Tenant.Status.ACTIVE).only("slug")
    }
