"""Reads of metering: statements (priced from intervals, grants and the price table) and the
data behind the team and platform dashboards. The page, the CSV/JSON export and the API all call
`tenant_statement` / `month_statements`, so they show the same numbers."""

from __future__ import annotations

import re
import zoneinfo
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from decimal import Decimal

from django.conf import settings
from django.db.models import DecimalField, ExpressionWrapper, F, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from catalog.models import ResourceClass
from metering import cluster_prices, pricing
from metering.models import AllocationInterval, Budget, ModelRollup, PriceRule, UsageRollup
from scheduler.cluster.models import Node
from scheduler.health.models import HealthImpact
from tenants.hooks import BudgetLeft
from tenants.models import QuotaGrant, Tenant

LOW_UTIL = Decimal("0.25")
ZERO = Decimal(0)


def billing_tz() -> tzinfo:
    return zoneinfo.ZoneInfo(settings.BILLING_TIME_ZONE or settings.TIME_ZONE)


def current_month(now: datetime | None = None) -> date:
    return (now or timezone.now()).astimezone(billing_tz()).date().replace(day=1)


# The months a statement can be asked for. Bounded so that a month's window, its neighbours (the
# page's links) and any time zone's offset stay inside `datetime`'s years 1-9999: 9999-12 and
# 0001-01 were 500s.
FIRST_MONTH = date(2000, 1, 1)
LAST_MONTH = date(2999, 12, 1)
MONTH_HELP = f"month must be YYYY-MM, from {FIRST_MONTH:%Y-%m} to {LAST_MONTH:%Y-%m}"
_MONTH = re.compile(r"(\d{4})-(\d{1,2})", re.ASCII)


def parse_month(value: str | None, now: datetime | None = None) -> date:
    """'2026-11' -> date(2026, 11, 1); empty -> this month; anything else, or a month outside
    FIRST_MONTH..LAST_MONTH -> ValueError(MONTH_HELP)."""
    if not value:
        return current_month(now)
    match = _MONTH.fullmatch(value)
    if not match or not 1 <= int(match[2]) <= 12:
        raise ValueError(MONTH_HELP)
    month = date(int(match[1]), int(match[2]), 1)
    if not FIRST_MONTH <= month <= LAST_MONTH:
        raise ValueError(MONTH_HELP)
    return month


def price_schedules(classes=None) -> dict[int, pricing.PriceSchedule]:
    """Resource class id -> its price schedule (for `classes`, default all): one query for the
    rules, one more when the classes are not given."""
    if classes is None:
        classes = list(ResourceClass.objects.all())
    by_pk = {rc.pk: rc for rc in classes}
    rules: dict[int, list[tuple[datetime, Decimal]]] = defaultdict(list)
    if by_pk:
        for rc_id, at, price in PriceRule.objects.filter(resource_class_id__in=by_pk).values_list(
            "resource_class_id", "effective_from", "price_per_hour"
        ):
            rules[rc_id].append((at, price))
    return {
        pk: pricing.PriceSchedule(default=rc.price_per_hour, changes=tuple(rules.get(pk, ())))
        for pk, rc in by_pk.items()
    }


def month_window_until(month: date, now: datetime) -> pricing.Window:
    """The month in the billing time zone, up to `now` while it runs."""
    full = pricing.month_window(month, billing_tz())
    return pricing.Window(full.start, max(full.start, min(full.end, now)))


def month_statements(
    month: date, tenant_ids: list[int], *, basis: str | None = None, now: datetime | None = None
) -> dict[int, pricing.Statement]:
    """tenant id -> its statement for the month (five queries for any number of tenants), each
    pod's time priced with its cluster's factor (metering/cluster_prices.py)."""
    now = now or timezone.now()
    basis = basis or settings.BILLING_BASIS
    window = month_window_until(month, now)
    alloc: dict[tuple[int, int], list[pricing.Span]] = defaultdict(list)
    waived: dict[tuple[int, int], list[pricing.Span]] = defaultdict(list)
    intervals = list(
        AllocationInterval.objects.with_seen_until()
        .filter(
            tenant_id__in=tenant_ids,
            resource_class__isnull=False,
            started_at__lt=window.end,
            seen_until__gt=window.start,
        )
        .values_list(
            "tenant_id",
            "resource_class_id",
            "started_at",
            "seen_until",
            "units",
            "pod_uid",
            "cluster__price_factor",
        )
    )
    # Nothing allocated, nothing to waive: no query for it.
    failed_under = _failed_gpu_pods(tenant_ids, window) if intervals else {}
    for tenant_id, rc_id, start, seen, units, pod_uid, factor in intervals:
        # An open interval counts up to the last minute the ingest saw its pod.
        alloc[(tenant_id, rc_id)].append(pricing.Span(start, seen, units, factor))
        failed_at = failed_under.get(pod_uid)
        if failed_at is not None and failed_at < seen:
            waived[(tenant_id, rc_id)].append(
                pricing.Span(max(start, failed_at), seen, units, factor)
            )
    quota: dict[tuple[int, int], list[pricing.Span]] = defaultdict(list)
    grants = list(
        QuotaGrant.objects.filter(tenant_id__in=tenant_ids, starts_at__lt=window.end).values_list(
            "tenant_id",
            "resource_class_id",
            "starts_at",
            "ends_at",
            "ended_at",
            "amount",
            "placement",
        )
    )
    placed = cluster_prices.placement_factors({g[-1] for g in grants})
    for tenant_id, rc_id, start, ends, ended, amount, placement in grants:
        end = min([t for t in (ends, ended) if t is not None], default=None)
        quota[(tenant_id, rc_id)].append(pricing.Span(start, end, amount, placed[placement]))
    observed: dict[tuple[int, int], list[tuple[datetime, Decimal, Decimal]]] = defaultdict(list)
    # Utilisation is only ever known for allocated pods: no intervals, no rollups to read.
    observed_rows = (
        UsageRollup.objects.none()
        if not alloc
        else UsageRollup.objects.filter(
            period=UsageRollup.Period.HOUR,
            tenant_id__in=tenant_ids,
            start__gte=window.start,
            start__lt=window.end,
            known_hours__gt=0,
        )
    )
    for tenant_id, rc_id, start, known, used in observed_rows.values_list(
        "tenant_id", "resource_class_id", "start", "known_hours", "used_hours"
    ):
        observed[(tenant_id, rc_id)].append((start, known, used))
    keys = alloc.keys() | quota.keys() | observed.keys()
    class_ids = {rc for _, rc in keys}
    classes = {rc.pk: rc for rc in ResourceClass.objects.filter(pk__in=class_ids)}
    schedules = price_schedules(classes.values())
    usages: dict[int, list[pricing.ClassUsage]] = defaultdict(list)
    for tenant_id, rc_id in keys:
        rc = classes[rc_id]
        usages[tenant_id].append(
            pricing.ClassUsage(
                slug=rc.slug,
                name=rc.display_name,
                gpu_fraction=rc.gpu_fraction,
                schedule=schedules[rc_id],
                allocation=tuple(alloc.get((tenant_id, rc_id), ())),
                quota=tuple(quota.get((tenant_id, rc_id), ())),
                observed=tuple(observed.get((tenant_id, rc_id), ())),
                waived=tuple(waived.get((tenant_id, rc_id), ())),
            )
        )
    return {tid: pricing.build_statement(usages.get(tid, []), window, basis) for tid in tenant_ids}


def _failed_gpu_pods(tenant_ids: list[int], window: pricing.Window) -> dict[str, datetime]:
    """pod uid -> when a GPU failed under it, where the health policy waives the time after
    (one query)."""
    out: dict[str, datetime] = {}
    for pod_uid, at in HealthImpact.objects.filter(
        tenant_id__in=tenant_ids, event__waive_billing=True, event__opened_at__lt=window.end
    ).values_list("pod_uid", "event__opened_at"):
        out[pod_uid] = min(at, out.get(pod_uid, at))
    return out


_INTERVAL_COLUMNS = (
    "workload_id",
    "tenant_id",
    "resource_class_id",
    "started_at",
    "seen_until",
    "units",
    "pod_uid",
    "cluster__price_factor",
)


def workload_costs(
    workload_ids: Iterable[int], *, window: pricing.Window | None = None
) -> dict[int, Decimal]:
    """Workload id -> what its pods were seen to hold, priced as the statement prices it (the
    price in force each minute, the time on a failed GPU waived), within `window` (default its
    whole life): the statement's allocation, split by workload. Two or three queries for any
    number of workloads; a workload no pod of which was seen costs 0."""
    ids = list(workload_ids)
    rows = list(
        AllocationInterval.objects.with_seen_until()
        .filter(workload_id__in=ids, resource_class__isnull=False)
        .values_list(*_INTERVAL_COLUMNS)
    )
    return {**dict.fromkeys(ids, pricing.money(ZERO)), **_priced_by_workload(rows, window)}


def month_workload_costs(tenant: Tenant, month: date, now: datetime) -> list[tuple[int, Decimal]]:
    """The team's workloads whose pods held GPUs in the month, with what each cost in it (the
    statement's "by workload" table), dearest first; one read of the month's intervals."""
    window = month_window_until(month, now)
    rows = list(
        AllocationInterval.objects.with_seen_until()
        .filter(tenant=tenant, workload__isnull=False, resource_class__isnull=False)
        .filter(started_at__lt=window.end, seen_until__gt=window.start)
        .values_list(*_INTERVAL_COLUMNS)
    )
    costs = _priced_by_workload(rows, window)
    return sorted(costs.items(), key=lambda item: (-item[1], item[0]))


def _priced_by_workload(rows: list[tuple], window: pricing.Window | None) -> dict[int, Decimal]:
    """Intervals (`_INTERVAL_COLUMNS`) priced by workload, within `window` (default: all of
    them), waivers taken off; the prices and the failures in two queries."""
    if not rows:
        return {}
    if window is None:
        window = pricing.Window(min(r[3] for r in rows), max(r[4] for r in rows))
    schedules = price_schedules(ResourceClass.objects.filter(pk__in={r[2] for r in rows}))
    failed = _failed_gpu_pods(list({r[1] for r in rows if r[1] is not None}), window)
    numerators: dict[int, Decimal] = defaultdict(Decimal)
    for workload_id, _, rc_id, start, seen, units, pod_uid, factor in rows:
        schedule = schedules[rc_id]
        numerators[workload_id] += pricing.cost_numerator(
            [pricing.Span(start, seen, units, factor)], schedule, window
        )
        failed_at = failed.get(pod_uid)
        if failed_at is not None and failed_at < seen:
            waived = pricing.Span(max(start, failed_at), seen, units, factor)
            numerators[workload_id] -= pricing.cost_numerator([waived], schedule, window)
    return {
        workload_id: pricing.money(max(numerator, ZERO) / pricing.HOUR_US)
        for workload_id, numerator in numerators.items()
    }


def all_statements(month: date, now: datetime) -> dict[int, pricing.Statement]:
    """Every tenant's statement for the month: the one batch the platform page's fleet split,
    waste ranking and roll-ups share."""
    return month_statements(month, list(Tenant.objects.values_list("pk", flat=True)), now=now)


def tenant_statement(
    tenant: Tenant, month: date, *, basis: str | None = None, now: datetime | None = None
) -> pricing.Statement:
    return month_statements(month, [tenant.pk], basis=basis, now=now)[tenant.pk]


def budget_for(tenant: Tenant, month: date) -> Decimal | None:
    row = Budget.objects.filter(tenant=tenant, month=month).values_list("amount", flat=True).first()
    return row if row is not None else tenant.monthly_budget


def budgets_for_month(month: date) -> dict[int, Decimal]:
    """tenant id -> budget of the month, for every tenant that has one (two queries)."""
    out: dict[int, Decimal] = {
        pk: amount
        for pk, amount in Tenant.objects.filter(monthly_budget__isnull=False).values_list(
            "pk", "monthly_budget"
        )
        if amount is not None
    }
    out.update(Budget.objects.filter(month=month).values_list("tenant_id", "amount"))
    return out


@dataclass(frozen=True)
class BudgetState:
    month: date
    cost: Decimal
    budget: Decimal | None
    level: int  # 0, 80, 100
    # The month's cost at its end at the month-so-far burn rate (pricing.month_end_forecast).
    forecast: Decimal | None = None

    @property
    def percent(self) -> int | None:
        if not self.budget:
            return None
        return int(self.cost * 100 / self.budget)

    @property
    def forecast_over(self) -> bool:
        """The forecast passes the budget while the spend has not reached it yet."""
        return bool(
            self.budget and self.forecast is not None and self.cost < self.budget < self.forecast
        )

    def forecast_warning_due(self, now: datetime) -> bool:
        """The forecast passes the budget, and BUDGET_FORECAST_AFTER_H hours of the month have
        given a burn rate to trust (a team's or a department's warning alike)."""
        started = pricing.month_window(self.month, billing_tz()).start
        return self.forecast_over and now - started >= timedelta(
            hours=settings.BUDGET_FORECAST_AFTER_H
        )


def budget_state_of(
    month: date, cost: Decimal, budget: Decimal | None, now: datetime
) -> BudgetState:
    full = pricing.month_window(month, billing_tz())
    return BudgetState(
        month,
        cost,
        budget,
        pricing.budget_level(cost, budget),
        pricing.month_end_forecast(cost, full, now),
    )


def budget_state(tenant: Tenant, now: datetime | None = None) -> BudgetState:
    now = now or timezone.now()
    month = current_month(now)
    cost = tenant_statement(tenant, month, now=now).total
    return budget_state_of(month, cost, budget_for(tenant, month), now)


def budget_left(tenant: Tenant, now: datetime | None = None) -> BudgetLeft | None:
    """The team's budget this month, what is spent and what is left (never below zero), for an
    ask's cost to be read against; None while no budget is set."""
    state = budget_state(tenant, now)
    if state.budget is None:
        return None
    return _left(state.month, state.budget, state.cost)


def budgets_left(tenant_ids: Iterable[int], now: datetime | None = None) -> dict[int, BudgetLeft]:
    """`budget_left` for many teams in one batch: tenant id -> {budget, spent, left, month} for
    those of `tenant_ids` with a budget this month (the others are absent). Two queries for the
    budgets, then the month's statements of the teams that have one (at most five more),
    however many teams: the approval queue reads every shown ask's team with it."""
    now = now or timezone.now()
    month = current_month(now)
    wanted = set(tenant_ids)
    budgets = {pk: amount for pk, amount in budgets_for_month(month).items() if pk in wanted}
    if not budgets:
        return {}
    statements = month_statements(month, sorted(budgets), now=now)
    return {pk: _left(month, amount, statements[pk].total) for pk, amount in budgets.items()}


def _left(month: date, budget: Decimal, spent: Decimal) -> BudgetLeft:
    """What is left is never below zero."""
    return BudgetLeft(budget=budget, spent=spent, left=max(Decimal(0), budget - spent), month=month)


# --- dashboards --------------------------------------------------------------------------------


def _gpu(field: str):
    return ExpressionWrapper(
        F(field) * F("gpu_fraction"), output_field=DecimalField(max_digits=20, decimal_places=8)
    )


def team_series(tenant: Tenant, *, days: int = 7, now: datetime | None = None) -> dict:
    """Hourly held (quota) vs allocated vs used, per resource class, for a chart."""
    now = now or timezone.now()
    since = (now - timedelta(days=days)).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    rows = (
        UsageRollup.objects.filter(tenant=tenant, period=UsageRollup.Period.HOUR, start__gte=since)
        .order_by("start")
        .values_list(
            "resource_class__slug", "start", "quota_hours", "allocated_hours", "used_hours"
        )
    )
    series: dict[str, dict[str, list]] = {}
    for slug, start, quota, allocated, used in rows:
        s = series.setdefault(slug, {"t": [], "held": [], "allocated": [], "used": []})
        s["t"].append(start.isoformat())
        s["held"].append(float(quota))
        s["allocated"].append(float(allocated))
        s["used"].append(float(used))
    return series


def low_use_holders(tenant: Tenant, *, threshold: Decimal = LOW_UTIL) -> list[AllocationInterval]:
    """Open intervals whose pods hold GPUs while their mean utilisation is below `threshold`."""
    rows = (
        AllocationInterval.objects.filter(tenant=tenant, ended_at__isnull=True, util_samples__gt=0)
        .select_related("resource_class", "workload")
        .order_by("namespace", "pod_name")
    )
    return [r for r in rows if r.util_mean is not None and r.util_mean < threshold]


def capacity_by_model() -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for model, count in Node.objects.filter(schedulable=True, ready=True).values_list(
        "gpu_model", "gpu_count"
    ):
        if model:
            out[model] += count
    return dict(out)


def platform_series(*, days: int = 365, now: datetime | None = None) -> dict:
    """Per GPU model and day: allocated and used GPU-hours as shares of capacity (current
    inventory), over `days` of daily rollups; and the window's headline numbers."""
    now = now or timezone.now()
    since = (
        (now - timedelta(days=days))
        .astimezone(UTC)
        .replace(hour=0, minute=0, second=0, microsecond=0)
    )
    capacity = capacity_by_model()
    rows = ModelRollup.objects.filter(start__gte=since).values_list(
        "start", "gpu_model", "allocated_gpu_hours", "used_gpu_hours", "known_gpu_hours"
    )
    series: dict[str, dict[str, list]] = {}
    totals = {"allocated": ZERO, "used": ZERO, "known": ZERO}
    first: datetime | None = None
    for start, model, allocated, used, known in rows:
        first = start if first is None else min(first, start)
        cap_hours = Decimal(capacity.get(model, 0) * 24)
        s = series.setdefault(model, {"t": [], "allocated": [], "used": []})
        s["t"].append(start.date().isoformat())
        s["allocated"].append(round(float(allocated / cap_hours * 100), 2) if cap_hours else None)
        s["used"].append(round(float(used / cap_hours * 100), 2) if cap_hours else None)
        totals["allocated"] += allocated
        totals["used"] += used
        totals["known"] += known
    # The headline divides by the capacity of the time metered so far (a fresh install has no
    # year of history), at most the window.
    metered_h = Decimal(int((now - first).total_seconds()) / 3600) if first else ZERO
    cap_total = Decimal(sum(capacity.values())) * min(metered_h, Decimal(24 * days))
    return {
        "series": series,
        "capacity": capacity,
        "allocated_gpu_hours": totals["allocated"],
        "used_gpu_hours": totals["used"],
        "idle_gpu_hours": max(totals["known"] - totals["used"], ZERO),
        "allocated_share": (totals["allocated"] / cap_total * 100) if cap_total else None,
        "used_share": (totals["used"] / cap_total * 100) if cap_total else None,
        "days": days,
    }


def cost_by_tenant(month: date, *, now: datetime | None = None) -> list[tuple[str, Decimal]]:
    """Cost per tenant this month from daily rollups × the price in force each day (the
    dashboard's quick figure; statements are exact). Classes whose price does not change in
    the month are summed in the database."""
    window = month_window_until(month, now or timezone.now())
    schedules = price_schedules()
    changing = {
        pk
        for pk, s in schedules.items()
        if any(window.start < at < window.end for at, _ in s.changes)
    }
    days = UsageRollup.objects.filter(
        period=UsageRollup.Period.DAY, start__gte=window.start, start__lt=window.end
    )
    cost: dict[str, Decimal] = defaultdict(Decimal)
    for slug, rc_id, hours in (
        days.exclude(resource_class_id__in=changing)
        .values("tenant__slug", "resource_class_id")
        .annotate(h=Sum("allocated_hours"))
        .values_list("tenant__slug", "resource_class_id", "h")
    ):
        cost[slug] += hours * schedules[rc_id].at(window.start)
    if changing:
        for slug, rc_id, start, hours in days.filter(resource_class_id__in=changing).values_list(
            "tenant__slug", "resource_class_id", "start", "allocated_hours"
        ):
            cost[slug] += hours * schedules[rc_id].at(start)
    return sorted(((s, pricing.money(c)) for s, c in cost.items()), key=lambda x: -x[1])


def idle_hours_this_month(month: date, *, now: datetime | None = None) -> Decimal:
    """GPU-hours allocated but unused (where utilisation is known) this month, all tenants."""
    window = month_window_until(month, now or timezone.now())
    agg = ModelRollup.objects.filter(start__gte=window.start, start__lt=window.end).aggregate(
        k=Coalesce(Sum("known_gpu_hours"), ZERO), u=Coalesce(Sum("used_gpu_hours"), ZERO)
    )
    return max(agg["k"] - agg["u"], ZERO)
