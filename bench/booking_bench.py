"""Booking ahead (issue 52): the capacity check over a window, under the pool's and tenant's
row locks, and the calendar of one class for 8 weeks, on 2,000 grants over 20 classes and 90
days, next to today's sum-all check (the SUM of every grant still holding, under the same
locks) measured in the same run as the baseline.

Goals: the windowed check under lock p95 < 20 ms; the calendar of one class for 8 weeks
p95 < 100 ms. PostgreSQL only, no cluster: a throwaway database, dropped at the end.
"""

from __future__ import annotations

import random
import statistics
import time
from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from bench.isolation import throwaway_database
from catalog.models import Pool, ResourceClass
from tenants import calendars
from tenants.capacity_time import Window
from tenants.models import QuotaGrant, Tenant
from tenants.services.capacity import check_capacity
from tenants.services.locks import lock_rows

CLASSES, TENANTS, GRANTS, DAYS = 20, 40, 2000, 90
SAMPLES = 200
CHECK_GOAL_MS, CALENDAR_GOAL_MS = 20.0, 100.0


class _Rollback(Exception):
    """Leave the measured transaction without writing anything."""


def _seed(rng: random.Random) -> tuple[list[ResourceClass], list[Tenant]]:
    classes = [
        ResourceClass.objects.create(
            slug=f"bench-a100-80gb-mig-{i}",
            gpu_model="A100-80GB",
            kind="mig",
            profile=f"{1 + i % 7}g.{10 * (1 + i % 7)}gb",
            resource_name=f"nvidia.com/mig-bench-{i}",
            memory_gb=10,
            gpu_fraction=Decimal("0.1429"),
        )
        for i in range(CLASSES)
    ]
    for rc in classes:
        Pool.objects.create(resource_class=rc, capacity=10_000, max_grant_days=365)
    tenants = [
        Tenant.objects.create(slug=f"bench-team-{i}", name=f"Bench {i}") for i in range(TENANTS)
    ]
    now = timezone.now()
    rows = []
    for _ in range(GRANTS):
        start = now + timedelta(hours=rng.randrange(0, DAYS * 24))
        open_ended = rng.random() < 0.02
        rows.append(
            QuotaGrant(
                tenant=rng.choice(tenants),
                resource_class=rng.choice(classes),
                amount=rng.randint(1, 8),
                starts_at=start,
                ends_at=None if open_ended else start + timedelta(hours=rng.randint(4, 14 * 24)),
            )
        )
    QuotaGrant.objects.bulk_create(rows)
    return classes, tenants


def _timed(fn, samples: int) -> list[float]:
    out = []
    for i in range(samples):
        t0 = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _under_lock(rc: ResourceClass, tenant: Tenant, check) -> None:
    try:
        with transaction.atomic():
            locked = lock_rows(pools=[rc.pk], tenant=tenant)
            check(locked)
            raise _Rollback
    except _Rollback:
        pass


def run() -> int:
    rng = random.Random(52)
    with throwaway_database("test_gpu_portal_bench_booking"):
        classes, tenants = _seed(rng)
        now = timezone.now()

        def windowed(i: int) -> None:
            rc, tenant = classes[i % CLASSES], tenants[i % TENANTS]
            start = now + timedelta(days=rng.randrange(0, DAYS))
            window = Window(start, start + timedelta(days=rng.randint(1, 14)))
            _under_lock(
                rc,
                tenant,
                lambda locked: check_capacity([(rc, 1)], now, pools=locked.pools, window=window),
            )

        def sum_all(i: int) -> None:  # today's check: every grant still holding, summed
            rc, tenant = classes[i % CLASSES], tenants[i % TENANTS]

            def check(locked) -> None:
                granted = (
                    QuotaGrant.objects.holding(now)
                    .filter(resource_class_id=rc.pk)
                    .aggregate(total=Sum("amount"))["total"]
                    or 0
                )
                assert granted + 1 <= locked.pools[rc.pk].grantable

            _under_lock(rc, tenant, check)

        def calendar(i: int) -> None:
            calendars.class_calendars([classes[i % CLASSES]], now=now, weeks=8)

        for fn in (windowed, sum_all, calendar):  # warm the connection and the plans
            _timed(fn, 10)
        base = _timed(sum_all, SAMPLES)
        check = _timed(windowed, SAMPLES)
        cal = _timed(calendar, SAMPLES)
    base_p95, check_p95, cal_p95 = _p95(base), _p95(check), _p95(cal)
    print(f"booking: {GRANTS} grants, {CLASSES} classes, {DAYS} days, {SAMPLES} samples each")
    print(f"{'':38}{'p50 ms':>10}{'p95 ms':>10}{'× baseline p95':>16}{'goal':>12}")
    for name, values, goal in (
        ("sum-all check under lock (baseline)", base, None),
        ("windowed check under lock", check, CHECK_GOAL_MS),
        ("calendar, one class, 8 weeks", cal, CALENDAR_GOAL_MS),
    ):
        p95 = _p95(values)
        said = f"< {goal:g} ms" if goal else ""
        print(
            f"{name:38}{statistics.median(values):>10.2f}{p95:>10.2f}"
            f"{p95 / base_p95:>16.2f}{said:>12}"
        )
    met = check_p95 < CHECK_GOAL_MS and cal_p95 < CALENDAR_GOAL_MS
    print("booking goals:", "met" if met else "NOT met")
    return 0 if met else 1
