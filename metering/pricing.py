"""The arithmetic of chargeback, pure: intervals, price schedules, month windows, statements.

No Django, no I/O. Time is integer microseconds of UTC datetimes, money is Decimal, and rounding
happens once, at the end of each line (cents, half up), so a statement's numbers are exact.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from decimal import ROUND_HALF_UP, Decimal
from typing import ClassVar

HOUR_US = 3_600_000_000
CENT = Decimal("0.01")
HOURS_PLACES = Decimal("0.0001")
BASES = ("allocation", "quota", "max")


def _us(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def money(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def hours(microseconds: int | Decimal) -> Decimal:
    """Unit-microseconds as unit-hours, to 4 places (display and export)."""
    return (Decimal(microseconds) / HOUR_US).quantize(HOURS_PLACES, rounding=ROUND_HALF_UP)


ONE = Decimal(1)


@dataclass(frozen=True)
class Span:
    """`units` held from `start` to `end` (end None: still held, counted up to the window end),
    on a cluster whose GPU hours cost `factor` times the list price (1: a single cluster)."""

    start: datetime
    end: datetime | None
    units: int = 1
    factor: Decimal = ONE


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime

    def clip(self, span: Span) -> tuple[datetime, datetime] | None:
        start = max(span.start, self.start)
        end = min(span.end or self.end, self.end)
        return (start, end) if end > start else None


def month_start(day: date) -> date:
    return day.replace(day=1)


def next_month(day: date) -> date:
    return (day.replace(day=28) + timedelta(days=4)).replace(day=1)


def month_window(month: date, tz: tzinfo) -> Window:
    """The month that starts on `month` (a date, day ignored) in time zone `tz`, in UTC."""
    first = month_start(month)
    start = datetime(first.year, first.month, 1, tzinfo=tz)
    after = next_month(first)
    end = datetime(after.year, after.month, 1, tzinfo=tz)
    return Window(start.astimezone(UTC), end.astimezone(UTC))


@dataclass(frozen=True)
class PriceSchedule:
    """A price per unit-hour over time: `default` until the first change, then each change's
    price from its instant on."""

    default: Decimal
    changes: tuple[tuple[datetime, Decimal], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "changes", tuple(sorted(self.changes)))

    def at(self, when: datetime) -> Decimal:
        instants = [c[0] for c in self.changes]
        i = bisect.bisect_right(instants, when)
        return self.changes[i - 1][1] if i else self.default

    def segments(self, start: datetime, end: datetime) -> list[tuple[datetime, datetime, Decimal]]:
        """[start, end) cut at every price change inside it, each piece with its price."""
        out = []
        cursor = start
        for instant, _ in self.changes:
            if cursor < instant < end:
                out.append((cursor, instant, self.at(cursor)))
                cursor = instant
        out.append((cursor, end, self.at(cursor)))
        return out


def unit_microseconds(spans: Iterable[Span], window: Window) -> int:
    total = 0
    for span in spans:
        clipped = window.clip(span)
        if clipped:
            total += span.units * _us(clipped[1] - clipped[0])
    return total


def cost_numerator(spans: Iterable[Span], schedule: PriceSchedule, window: Window) -> Decimal:
    """Σ units × microseconds × price: exact; divide by HOUR_US once at the end."""
    total = Decimal(0)
    for span in spans:
        clipped = window.clip(span)
        if not clipped:
            continue
        part = Decimal(0)
        for start, end, price in schedule.segments(*clipped):
            part += span.units * _us(end - start) * price
        total += part if span.factor == ONE else part * span.factor
    return total


def cost(spans: Iterable[Span], schedule: PriceSchedule, window: Window) -> Decimal:
    return money(cost_numerator(spans, schedule, window) / HOUR_US)


def merge_spans(spans: Sequence[Span]) -> list[Span]:
    """Spans of one pod seen as several (a worker restart that reopened it) merged where they
    touch or overlap, so no microsecond is counted twice. Units (and factors) must be equal."""
    out: list[Span] = []
    for span in sorted(spans, key=lambda s: s.start):
        if out and (out[-1].units, out[-1].factor) == (span.units, span.factor):
            last = out[-1]
            last_end = last.end
            if last_end is None or span.start <= last_end:
                end = None if last_end is None or span.end is None else max(last_end, span.end)
                out[-1] = Span(last.start, end, last.units, last.factor)
                continue
        out.append(span)
    return out


@dataclass(frozen=True)
class ClassUsage:
    """What a statement line is made of, for one resource class in one window."""

    slug: str
    name: str
    gpu_fraction: Decimal
    schedule: PriceSchedule
    allocation: tuple[Span, ...] = ()
    quota: tuple[Span, ...] = ()
    # (hour start, unit-hours allocated with known utilisation, unit-hours used)
    observed: tuple[tuple[datetime, Decimal, Decimal], ...] = ()
    # Allocation on GPUs that failed under the pods (GPU health, where the policy waives it):
    # shown on the statement, taken off what is billed.
    waived: tuple[Span, ...] = ()


@dataclass(frozen=True)
class StatementLine:
    slug: str
    name: str
    gpu_fraction: Decimal
    allocated_hours: Decimal  # unit-hours
    allocated_gpu_hours: Decimal  # GPU-equivalent hours
    allocated_cost: Decimal
    quota_hours: Decimal
    quota_gpu_hours: Decimal
    quota_cost: Decimal
    billed_cost: Decimal
    observed_hours: Decimal  # allocated unit-hours with known utilisation
    used_hours: Decimal
    idle_hours: Decimal
    idle_cost: Decimal
    waived_hours: Decimal = Decimal("0.0000")  # unit-hours on failed GPUs, not billed
    waived_cost: Decimal = Decimal("0.00")

    def as_dict(self) -> dict:
        return {k: str(v) if isinstance(v, Decimal) else v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Statement:
    window: Window
    basis: str
    lines: tuple[StatementLine, ...] = field(default_factory=tuple)

    @property
    def total(self) -> Decimal:
        return sum((line.billed_cost for line in self.lines), Decimal(0))

    @property
    def allocated_cost(self) -> Decimal:
        return sum((line.allocated_cost for line in self.lines), Decimal(0))

    @property
    def quota_cost(self) -> Decimal:
        return sum((line.quota_cost for line in self.lines), Decimal(0))

    @property
    def idle_cost(self) -> Decimal:
        return sum((line.idle_cost for line in self.lines), Decimal(0))

    @property
    def waived_cost(self) -> Decimal:
        return sum((line.waived_cost for line in self.lines), Decimal(0))

    @property
    def allocated_gpu_hours(self) -> Decimal:
        return sum((line.allocated_gpu_hours for line in self.lines), Decimal(0))

    @property
    def idle_hours(self) -> Decimal:
        return sum((line.idle_hours for line in self.lines), Decimal(0))


def billed(basis: str, allocated: Decimal, quota: Decimal) -> Decimal:
    if basis == "allocation":
        return allocated
    if basis == "quota":
        return quota
    if basis == "max":
        return max(allocated, quota)
    raise ValueError(f"billing basis must be one of {BASES}, not {basis!r}")


def statement_line(usage: ClassUsage, window: Window, basis: str) -> StatementLine:
    alloc_us = unit_microseconds(usage.allocation, window)
    quota_us = unit_microseconds(usage.quota, window)
    alloc_cost = cost(usage.allocation, usage.schedule, window)
    quota_cost = cost(usage.quota, usage.schedule, window)
    observed = used = idle_num = Decimal(0)
    for hour, known, used_h in usage.observed:
        if not window.start <= hour < window.end:
            continue
        observed += known
        used += used_h
        idle_num += max(known - used_h, Decimal(0)) * usage.schedule.at(hour)
    idle = max(observed - used, Decimal(0))
    waived_cost = cost(usage.waived, usage.schedule, window)
    return StatementLine(
        slug=usage.slug,
        name=usage.name,
        gpu_fraction=usage.gpu_fraction,
        allocated_hours=hours(alloc_us),
        allocated_gpu_hours=hours(alloc_us * usage.gpu_fraction),
        allocated_cost=alloc_cost,
        quota_hours=hours(quota_us),
        quota_gpu_hours=hours(quota_us * usage.gpu_fraction),
        quota_cost=quota_cost,
        billed_cost=max(billed(basis, alloc_cost, quota_cost) - waived_cost, Decimal("0.00")),
        observed_hours=observed.quantize(HOURS_PLACES),
        used_hours=used.quantize(HOURS_PLACES),
        idle_hours=idle.quantize(HOURS_PLACES),
        idle_cost=money(idle_num),
        waived_hours=hours(unit_microseconds(usage.waived, window)),
        waived_cost=waived_cost,
    )


def build_statement(usages: Iterable[ClassUsage], window: Window, basis: str) -> Statement:
    if basis not in BASES:
        raise ValueError(f"billing basis must be one of {BASES}, not {basis!r}")
    lines = [statement_line(u, window, basis) for u in sorted(usages, key=lambda u: u.slug)]
    return Statement(
        window=window,
        basis=basis,
        lines=tuple(
            line
            for line in lines
            if line.allocated_hours or line.quota_hours or line.observed_hours
        ),
    )


def budget_level(cost_so_far: Decimal, budget: Decimal | None) -> int:
    """0, 80 or 100: the highest warning threshold reached."""
    if budget is None or budget <= 0:
        return 0
    ratio = cost_so_far / budget
    if ratio >= 1:
        return 100
    if ratio >= Decimal("0.8"):
        return 80
    return 0


def month_end_forecast(cost_so_far: Decimal, month: Window, now: datetime) -> Decimal:
    """The month's cost at its end if spending goes on at the month-so-far rate (the burn
    rate). Before the month starts: nothing spent, nothing forecast; after it ends: what it cost."""
    if now >= month.end:
        return cost_so_far
    elapsed = _us(now - month.start)
    if elapsed <= 0:
        return cost_so_far
    return money(cost_so_far * _us(month.end - month.start) / elapsed)


@dataclass(frozen=True)
class FleetSplit:
    """Where the fleet's cost for a period went. `used + idle + unallocated - over == fleet`,
    to the cent: `over` is allocation billed above the fleet's own price for it (a class priced
    above its share of a GPU), zero in a price table that charges at cost."""

    FIELDS: ClassVar[tuple[str, ...]] = ("fleet", "used", "idle", "unallocated", "over")

    fleet: Decimal
    used: Decimal
    idle: Decimal
    unallocated: Decimal
    over: Decimal

    @property
    def allocated(self) -> Decimal:
        return self.used + self.idle


def split_fleet(fleet: Decimal, allocated: Decimal, idle: Decimal) -> FleetSplit:
    """Split the fleet's cost into allocated-and-used, allocated-but-idle and unallocated.
    `idle` is part of `allocated` (clipped to it)."""
    idle = min(max(idle, Decimal(0)), allocated)
    rest = fleet - allocated
    return FleetSplit(
        fleet=fleet,
        used=allocated - idle,
        idle=idle,
        unallocated=max(rest, Decimal(0)),
        over=max(-rest, Decimal(0)),
    )
