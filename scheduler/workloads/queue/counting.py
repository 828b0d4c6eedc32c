"""The facts a waiting workload's explanation reads (`waiting.explain`), and how they count in
the unit in force: compute slices per GPU model, or units per resource class (GPU_QUOTA_UNIT).

Plain data, filled by `selectors.waiting_for` from the database; pure: no Django, no I/O.
Other teams appear only as anonymous numbers (`TeamUse`), never by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from catalog import slices


@dataclass(frozen=True)
class Shape:
    """A resource class as an explanation counts and names it."""

    slug: str
    gpu_model: str
    kind: str  # whole | mig | shared
    profile: str
    slices: int  # compute slices of one unit
    label: str  # "A100-80GB MIG 3g.40gb"


@dataclass(frozen=True)
class Holder:
    """One of the team's own workloads that holds quota now."""

    name: str
    priority: str
    units: Mapping[str, int]  # class slug -> units it holds (all its pods)


@dataclass(frozen=True)
class TeamUse:
    """Another team of the cohort, anonymous: its grants and what its work holds."""

    granted: Mapping[str, int]
    used: Mapping[str, int]


@dataclass(frozen=True)
class PoolPolicy:
    borrowing_limit: int | None  # units of the class a team may borrow; None: no limit
    lend_idle: bool = True


@dataclass(frozen=True)
class Offer:
    """What the fleet has of a class now: units free on each node that offers it, and in all."""

    free: tuple[int, ...]
    total: int


@dataclass(frozen=True)
class Facts:
    state: str
    ask: Mapping[str, int]  # class slug -> units per pod
    pods: int  # pods admission reserves for (max replicas when autoscaled)
    priority: str
    shapes: Mapping[str, Shape]  # every active class
    granted: Mapping[str, int]  # the team's grants in force, by class slug
    holders: Sequence[Holder] = ()
    pools: Mapping[str, PoolPolicy] = field(default_factory=dict)
    others: Sequence[TeamUse] = ()
    fleet: Mapping[str, Offer] | None = None  # None: the inventory is not known
    unit: str = slices.UNIT_SLICES
    position: int | None = None
    kueue_reason: str = ""
    kueue_message: str = ""
    team_active: bool = True
    queue_held: bool = False
    priority_values: Mapping[str, int] = field(default_factory=dict)
    allowed_priorities: tuple[str, ...] = ()
    kind: str = "job"


# --- counting in the unit in force -------------------------------------------------------------


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class Units:
    """One line per GPU model counted in slices, or one per resource class in its own units."""

    def __init__(self, facts: Facts):
        self.f = facts
        self.by_slices = facts.unit != slices.UNIT_CLASS

    def shape(self, slug: str) -> Shape | None:
        return self.f.shapes.get(slug)

    def key(self, slug: str) -> str:
        shape = self.shape(slug)
        if shape is None:
            return slug
        return shape.gpu_model if self.by_slices else slug

    def amount(self, slug: str, units: int) -> int:
        shape = self.shape(slug)
        return units * shape.slices if self.by_slices and shape else units

    def total(self, units: Mapping[str, int], key: str) -> int:
        return sum(self.amount(s, n) for s, n in units.items() if self.key(s) == key)

    def slugs(self, key: str) -> list[str]:
        return [s for s in self.f.shapes if self.key(s) == key]

    def label(self, key: str) -> str:
        shape = self.shape(key)
        return shape.label if shape and not self.by_slices else key

    def count(self, n: int, key: str) -> str:
        """`14 slices`, or in class units `3 instances` / `2 GPUs` / `1 replica`."""
        if self.by_slices:
            return plural(n, "slice")
        kind = (self.shape(key) or Shape("", "", "whole", "", 0, "")).kind
        return plural(n, {"mig": "instance", "shared": "replica"}.get(kind, "GPU"))

    def held(self, slug: str, n: int) -> str:
        """`1 × 3g` (its model said already), `2 whole GPUs`, `1 shared replica`."""
        shape = self.shape(slug)
        if shape is None:
            return f"{n} × {slug}"
        if shape.kind == "mig":
            profile = shape.profile.split(".")[0] if self.by_slices else shape.profile
            return f"{n} × {profile}"
        if shape.kind == "shared":
            return plural(n, "shared replica")
        return f"{n} whole GPU" + ("s" if n != 1 else "")

    def ask(self, slug: str, n: int) -> str:
        shape = self.shape(slug)
        return f"{n} × {shape.label if shape else slug}"


# --- the team's line of the model (or class) the workload asks for -----------------------------


@dataclass(frozen=True)
class Line:
    key: str
    granted: int
    used: int
    need: int
    limit: int | None  # what the team may borrow beyond its grant; None: no limit
    idle: int  # what the cohort's other teams leave idle to lend, less what is borrowed

    @property
    def own_free(self) -> int:
        return max(0, self.granted - self.used)

    @property
    def borrowed(self) -> int:
        return max(0, self.used - self.granted)

    @property
    def can_borrow(self) -> int:
        room = self.idle if self.limit is None else max(0, self.limit - self.borrowed)
        return min(room, self.idle)

    @property
    def room(self) -> int:
        return self.own_free + self.can_borrow

    @property
    def fits(self) -> bool:
        return self.need <= self.room


def borrowing_limit(u: Units, key: str) -> int | None:
    """A team's borrowing limit of a line: its class's pool's, or in slices the widest of the
    model's pools', as the queue line renders it (None if any has no limit; a class without a
    pool lends and borrows nothing)."""
    widest = 0
    for slug in u.slugs(key):
        policy = u.f.pools.get(slug)
        if policy is None:
            continue
        if policy.borrowing_limit is None:
            return None
        widest = max(widest, u.amount(slug, policy.borrowing_limit))
    return widest


def line_of(u: Units, key: str, need: int) -> Line:
    f = u.f
    used = sum(u.total(h.units, key) for h in f.holders)
    granted = u.total(f.granted, key)
    lends = all(f.pools[s].lend_idle for s in u.slugs(key) if s in f.pools)
    lent, taken = 0, max(0, used - granted)
    for team in f.others:
        g, n = u.total(team.granted, key), u.total(team.used, key)
        lent += max(0, g - n) if lends else 0
        taken += max(0, n - g)
    return Line(key, granted, used, need, borrowing_limit(u, key), max(0, lent - taken))


# --- the fleet's shapes ------------------------------------------------------------------------


def placeable(fleet: Mapping[str, Offer], slug: str, per_pod: int, pods: int) -> bool:
    """Each pod needs its units of the class on one node."""
    offer = fleet.get(slug)
    if offer is None or per_pod < 1:
        return per_pod < 1
    return sum(free // per_pod for free in offer.free) >= pods
