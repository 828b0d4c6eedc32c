"""Capacity over time, pure: what is held at every instant of a window, and what still fits.

Every limit of the portal (a pool's capacity × overcommit, a tenant's ceiling in
GPU-equivalents, a department's quota in slices per GPU model, the auto-approval envelope per
class) is a limit at *every instant*, not on the sum of all grants ever made. A grant holds its
units on the half-open interval [starts_at, ends_at); one with no end holds every instant from
its start. An ask of a constant amount over a window fits when the highest level the others
reach inside the window, plus the ask, stays within the limit: so every check is "the peak of
a step function over a window", computed here by a sweep over the holds' starts and ends.

Holds are keyed: by resource class for a pool, by GPU model for a department, by anything a
later counter needs (a DRA device counter, a cluster), so the same functions serve them all.
No Django, no database: the services pass plain `Hold`s read under their row locks
(`tenants.services.capacity`)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

Number = int | Decimal


@dataclass(frozen=True)
class Hold:
    """Units one grant (or an ask, or anything else that counts) holds of `key` from
    `starts_at` until `ends_at` (None: open-ended, every instant from its start)."""

    key: Hashable
    amount: Number
    starts_at: datetime
    ends_at: datetime | None = None
    holder: str = ""  # who holds it (a team's slug), for the calendar and the messages
    ref: int | None = None  # the grant's id, for the messages

    def overlaps(self, start: datetime, end: datetime | None) -> bool:
        return (end is None or self.starts_at < end) and (
            self.ends_at is None or self.ends_at > start
        )


@dataclass(frozen=True)
class Window:
    """When an ask, a booking or an extension holds its units: [starts_at, ends_at), ends_at
    None for open-ended (every instant from the start)."""

    starts_at: datetime
    ends_at: datetime | None = None

    @property
    def length(self) -> timedelta | None:
        return None if self.ends_at is None else self.ends_at - self.starts_at


@dataclass(frozen=True)
class Profile:
    """A step function: `levels[i]` is held on [times[i], times[i + 1]); 0 before times[0]."""

    times: tuple[datetime, ...]
    levels: tuple[Number, ...]

    def level_at(self, at: datetime) -> Number:
        i = bisect_right(self.times, at) - 1
        return self.levels[i] if i >= 0 else 0

    def peak(self, start: datetime, end: datetime | None) -> Number:
        """The highest level held at any instant of [start, end) (end None: from start on)."""
        best = self.level_at(start)
        lo = bisect_right(self.times, start)
        hi = len(self.times) if end is None else bisect_left(self.times, end)
        for i in range(lo, hi):
            if self.levels[i] > best:
                best = self.levels[i]
        return best


def profile(holds: Iterable[Hold]) -> Profile:
    """The sweep: every start adds its units, every end takes them away, in time order."""
    deltas: dict[datetime, Number] = defaultdict(int)
    for h in holds:
        deltas[h.starts_at] += h.amount
        if h.ends_at is not None:
            deltas[h.ends_at] -= h.amount
    times: list[datetime] = []
    levels: list[Number] = []
    level: Number = 0
    for t in sorted(deltas):
        level += deltas[t]
        times.append(t)
        levels.append(level)
    return Profile(tuple(times), tuple(levels))


def by_key(holds: Iterable[Hold]) -> dict[Hashable, list[Hold]]:
    out: dict[Hashable, list[Hold]] = defaultdict(list)
    for h in holds:
        out[h.key].append(h)
    return dict(out)


def peaks(holds: Iterable[Hold], start: datetime, end: datetime | None) -> dict[Hashable, Number]:
    """key -> the highest level its holds reach inside [start, end)."""
    return {k: profile(hs).peak(start, end) for k, hs in by_key(holds).items()}


@dataclass(frozen=True)
class Overrun:
    """An ask that does not fit one limit: at `at` the others hold `held` of `limit`."""

    key: Hashable
    limit: Number
    held: Number  # the peak of the others inside the window
    asked: Number
    at: datetime  # the first instant of the window where the peak is reached
    open_ended: tuple[Hold, ...]  # holds with no end in force at `at`: they block for ever

    @property
    def room(self) -> Number:
        """The largest amount that fits the whole window (0 when none does)."""
        return max(0, self.limit - self.held)


def _first_peak_at(p: Profile, start: datetime, end: datetime | None, peak: Number) -> datetime:
    if p.level_at(start) == peak:
        return start
    lo = bisect_right(p.times, start)
    hi = len(p.times) if end is None else bisect_left(p.times, end)
    for i in range(lo, hi):
        if p.levels[i] == peak:
            return p.times[i]
    return start


def overruns(
    limits: Mapping[Hashable, Number],
    holds: Iterable[Hold],
    asked: Mapping[Hashable, Number],
    start: datetime,
    end: datetime | None,
) -> list[Overrun]:
    """Every key of `asked` whose limit the ask breaks at some instant of [start, end), with
    where and by whom (a key with no limit has none to give). Empty: it fits everywhere."""
    grouped = by_key(holds)
    out = []
    for key in sorted(asked, key=str):
        hs = grouped.get(key, [])
        p = profile(hs)
        held = p.peak(start, end)
        limit = limits.get(key, 0)
        if held + asked[key] > limit:
            at = _first_peak_at(p, start, end, held)
            blocking = tuple(
                h for h in hs if h.ends_at is None and h.starts_at <= at and h.amount > 0
            )
            out.append(Overrun(key, limit, held, asked[key], at, blocking))
    return out


def earliest_fit(
    limit: Number,
    holds: Iterable[Hold],
    amount: Number,
    *,
    not_before: datetime,
    length: timedelta | None,
    latest_start: datetime,
) -> datetime | None:
    """The earliest start, not before `not_before` and not after `latest_start`, of a window
    of `length` (None: open-ended) in which `amount` more fits at every instant. Held units
    only fall at an end, so the candidates are `not_before` and every end after it."""
    hs = list(holds)
    p = profile(hs)
    candidates = sorted(
        {not_before} | {h.ends_at for h in hs if h.ends_at is not None and h.ends_at > not_before}
    )
    for start in candidates:
        if start > latest_start:
            return None
        end = None if length is None else start + length
        if p.peak(start, end) + amount <= limit:
            return start
    return None


@dataclass(frozen=True)
class Slot:
    """One step of a calendar: from `starts_at` for `length`, at the busiest instant, how many
    units are free, granted (in force since before `now`) and booked (starting later)."""

    starts_at: datetime
    limit: Number
    granted: Number
    booked: Number
    holders: tuple[str, ...]  # who holds units at some instant of the slot

    @property
    def free(self) -> Number:
        return max(0, self.limit - self.granted - self.booked)


def calendar(
    limit: Number,
    holds: Iterable[Hold],
    *,
    now: datetime,
    start: datetime,
    steps: int,
    step: timedelta,
) -> list[Slot]:
    """`steps` slots of `step` from `start`: for each, the free units are those free at its
    busiest instant (so "free on that day" means free all day); granted and booked split
    what is held at that instant by whether the grant had started by `now`."""
    hs = list(holds)
    total, started = profile(hs), profile(h for h in hs if h.starts_at <= now)
    slots = []
    for i in range(steps):
        s = start + i * step
        e = s + step
        peak = total.peak(s, e)
        at = _first_peak_at(total, s, e, peak)
        granted = started.level_at(at)
        holders = tuple(sorted({h.holder for h in hs if h.overlaps(s, e) and h.holder}))
        slots.append(Slot(s, limit, granted, peak - granted, holders))
    return slots
