"""The fleet's cost for a month and where it went (issue 34, item 2): allocated and used,
allocated but idle, and unallocated, which add up to what the GPUs cost, to the cent.

- The fleet's cost: every GPU node in the inventory, from when the portal first saw it (or its
  first allocation, when pods held its GPUs before the inventory saw it), priced at its model's
  whole-GPU class (the price in force each hour) times its cluster's price factor. A model
  without a whole-GPU class is priced at its dearest class per GPU-equivalent. A node is cost
  whether or not it is healthy or schedulable: a broken GPU is paid for and shows as
  unallocated.
- Allocated and idle: the month's statements (the same numbers as every team's statement and
  the chargeback export), per GPU model of their classes.
- Unallocated: the rest (`pricing.split_fleet`).

The inventory holds the nodes there now: a node removed mid-month no longer counts for the
part of the month it was there (its allocations still do, and show as `over`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.db.models import Min
from django.utils import timezone

from catalog.models import ResourceClass
from metering import pricing, selectors
from metering.models import AllocationInterval
from scheduler.cluster.models import Node

ZERO = Decimal(0)


@dataclass(frozen=True)
class FleetCost:
    month: date
    window: pricing.Window
    total: pricing.FleetSplit
    by_model: tuple[tuple[str, int, pricing.FleetSplit], ...]  # model, GPUs, split


def _scaled(schedule: pricing.PriceSchedule, fraction: Decimal) -> pricing.PriceSchedule:
    """A class's unit price schedule as the price of a whole GPU of it."""
    return pricing.PriceSchedule(
        default=schedule.default / fraction,
        changes=tuple((at, price / fraction) for at, price in schedule.changes),
    )


def gpu_price_schedules(classes: list[ResourceClass]) -> dict[str, pricing.PriceSchedule]:
    """GPU model -> the price of one GPU-hour of it over time."""
    schedules = selectors.price_schedules(classes)
    out: dict[str, pricing.PriceSchedule] = {}
    dearest: dict[str, tuple[Decimal, pricing.PriceSchedule]] = {}
    for rc in classes:
        if rc.kind == ResourceClass.Kind.WHOLE and rc.gpu_fraction == 1:
            out[rc.gpu_model] = schedules[rc.pk]
        elif rc.gpu_fraction > 0:
            per_gpu = rc.price_per_hour / rc.gpu_fraction
            if rc.gpu_model not in dearest or per_gpu > dearest[rc.gpu_model][0]:
                dearest[rc.gpu_model] = (per_gpu, _scaled(schedules[rc.pk], rc.gpu_fraction))
    for model, (_, schedule) in dearest.items():
        out.setdefault(model, schedule)
    return out


def fleet_cost(
    month: date,
    *,
    now: datetime | None = None,
    statements: dict[int, pricing.Statement] | None = None,
) -> FleetCost:
    """`statements`: every tenant's for the month, when the caller has them already."""
    now = now or timezone.now()
    if statements is None:
        statements = selectors.all_statements(month, now)
    window = selectors.month_window_until(month, now)
    classes = list(ResourceClass.objects.all())
    model_of = {rc.slug: rc.gpu_model for rc in classes}
    prices = gpu_price_schedules(classes)

    spans: dict[str, list[pricing.Span]] = defaultdict(list)
    gpus: dict[str, int] = defaultdict(int)
    # A node was there from when the inventory first saw it, or earlier when pods held its GPUs
    # before that (an inventory rebuilt, or history imported): what ran on it proves it was paid.
    held_since = {
        (cluster, node): first
        for cluster, node, first in AllocationInterval.objects.values("cluster_id", "node_name")
        .annotate(first=Min("started_at"))
        .values_list("cluster_id", "node_name", "first")
    }
    for cluster, name, model, count, seen, factor in Node.objects.filter(
        gpu_count__gt=0
    ).values_list(
        "cluster_id", "name", "gpu_model", "gpu_count", "first_seen_at", "cluster__price_factor"
    ):
        if model:
            since = min(seen, held_since.get((cluster, name), seen))
            # a cluster's GPU hours at its own price (metering/cluster_prices.py)
            spans[model].append(pricing.Span(since, None, count, factor))
            gpus[model] += count

    allocated: dict[str, Decimal] = defaultdict(Decimal)
    idle: dict[str, Decimal] = defaultdict(Decimal)
    for statement in statements.values():
        for line in statement.lines:
            model = model_of.get(line.slug, "")
            allocated[model] += line.allocated_cost
            idle[model] += line.idle_cost

    by_model = []
    for model in sorted(spans.keys() | allocated.keys()):
        schedule = prices.get(model)
        fleet = pricing.cost(spans.get(model, ()), schedule, window) if schedule else ZERO
        split = pricing.split_fleet(fleet, allocated[model], idle[model])
        by_model.append((model, gpus.get(model, 0), split))
    total = pricing.FleetSplit(
        *(sum((getattr(s, f) for _, _, s in by_model), ZERO) for f in pricing.FleetSplit.FIELDS)
    )
    return FleetCost(month, window, total, tuple(by_model))
