"""What a team's quota promises against what exists (issue 35, 5): the platform grants more
than its GPUs (a pool's overcommit), so "14 unused" may stand for 7 that exist and 3 free now.
The team page says all three numbers; `promise` is pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from catalog.models import Pool
from scheduler.workloads.selectors import held_by_class
from tenants.selectors import QuotaLine


@dataclass(frozen=True)
class Promise:
    promised: int  # the team's quota of the class
    exist: int  # units the pool has
    free_now: int  # of the team's unused quota, what the pool has free to start now

    @property
    def words(self) -> str:
        return f"{self.promised} promised, {self.exist} exist, {self.free_now} free now"


def promise(line: QuotaLine, *, capacity: int, held_by_all: int) -> Promise:
    """A quota line against its pool: the team can start no more than its unused quota, nor
    more than the pool has left over what every team's work holds."""
    pool_free = max(0, capacity - held_by_all)
    return Promise(promised=line.granted, exist=capacity, free_now=min(line.free, pool_free))


def _capacity(line: QuotaLine) -> int:
    pool: Pool | None = getattr(line.resource_class, "pool", None)  # read with the line
    return pool.capacity if pool is not None else 0


def promises(lines: Iterable[QuotaLine]) -> dict[int, Promise]:
    """resource class id -> its promise, for a team's quota lines (one query: what every
    team's work holds; the pools came with the lines' classes)."""
    lines = list(lines)
    held = held_by_class() if lines else {}
    return {
        x.resource_class.pk: promise(
            x, capacity=_capacity(x), held_by_all=held.get(x.resource_class.slug, 0)
        )
        for x in lines
    }
