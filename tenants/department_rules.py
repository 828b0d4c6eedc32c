"""A department's quota, counted as grants are: per GPU model in compute slices. Pure: no
database (the services pass what the teams hold and what is asked)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from catalog import slices


def slices_by_model(items: Iterable[tuple[slices.ClassLike, int]]) -> dict[str, int]:
    """(resource class, units) pairs -> GPU model -> compute slices."""
    out: dict[str, int] = defaultdict(int)
    for rc, units in items:
        out[rc.gpu_model] += slices.slices_per_unit(rc) * units
    return dict(out)


def quota_overruns(
    department: str,
    quota: Mapping[str, int],
    held: Mapping[str, int],
    asked: Mapping[str, int],
    *,
    renewal: bool = False,
) -> list[str]:
    """Why this ask does not fit the department's quota (empty: it fits). A model the
    department has no quota of has none to give. A `renewal` asks to keep its slices longer:
    `held` is then what the other grants hold (the quota may have been lowered since)."""
    reasons = []
    for model in sorted(asked):
        limit, already, more = quota.get(model, 0), held.get(model, 0), asked[model]
        if already + more > limit:
            this = (
                f"besides the {more} this renewal keeps held"
                if renewal
                else f"and this asks for {more} more"
            )
            reasons.append(
                f"{model}: {department}'s teams hold {already} slices {this}, above the "
                f"department's quota of {limit} slices"
            )
    return reasons
