"""Grants in GPU-equivalents: every GPU resource of a model counted in compute slices.

A whole GPU is `SLICES_PER_GPU` (7, the compute slices of an A100/H100/H200/B200); a MIG
instance is its compute slices scaled to that (on 7-slice models a g-profile is g); a shared
replica is its fraction of a GPU. Kueue counts the same way through `resources.transformations`
in its Configuration (`kueue_transformations`): each GPU resource a pod asks for is replaced by
`SLICE_RESOURCE` units, so one quota line per model serves a 4g, a 3g and a whole-GPU ask alike,
and idle slices of any shape are lent in the cohort.

Kueue's quantities of extended resources are integers, so a unit that is not a whole number of
slices is rounded up: an A30's 1g (1 of 4) is 2, a shared replica at 4 per GPU is 2. Rounding up
never lets a team hold more than its grant.

Pure: no Django, no I/O beyond the catalog's JSON (`facts`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal
from typing import Protocol

from catalog import facts

SLICES_PER_GPU = 7
SLICE_RESOURCE = "gpu-portal.io/gpu-slices"

# The unit quotas are counted in (the GPU_QUOTA_UNIT setting): compute slices per model, or the
# former one line per resource class (a MIG profile's quota never serves another profile).
UNIT_SLICES = "slices"
UNIT_CLASS = "class"
UNITS = (UNIT_SLICES, UNIT_CLASS)


class ClassLike(Protocol):
    """What a resource class row (or its dict) needs to be counted in slices."""

    kind: str
    gpu_model: str
    profile: str
    gpu_fraction: Decimal


def slices_for_fraction(fraction: Decimal | float) -> int:
    """Slices of `fraction` of a GPU, rounded up (Kueue counts extended resources whole)."""
    return max(1, math.ceil(Decimal(str(fraction)) * SLICES_PER_GPU - Decimal("1e-9")))


def slices_per_unit(rc: ClassLike) -> int:
    """Compute slices one unit of a resource class counts for."""
    if rc.kind == "whole":
        return SLICES_PER_GPU
    if rc.kind == "mig":
        try:
            model = facts.get_model(rc.gpu_model)
            profile = model.profile(rc.profile)
        except (facts.UnknownModel, facts.UnknownProfile):
            return slices_for_fraction(rc.gpu_fraction)
        return slices_for_fraction(model.gpu_fraction(profile))
    return slices_for_fraction(rc.gpu_fraction)


def shared_replica_slices(replicas: int = facts.SHARED_REPLICAS) -> int:
    return slices_for_fraction(Decimal(1) / replicas)


def resource_slices(models: Iterable[facts.GpuModel] | None = None) -> dict[str, int]:
    """Every GPU resource name a pod may ask for -> its slices: whole GPUs, shared replicas and
    each MIG profile of the catalog's models. A MIG resource name carries its compute slices
    (`mig-3g.40gb`), so one name never means two sizes; the largest is kept if it ever did."""
    out = {
        facts.WHOLE_GPU_RESOURCE: SLICES_PER_GPU,
        facts.SHARED_GPU_RESOURCE: shared_replica_slices(),
    }
    for model in models if models is not None else facts.load_catalog().values():
        for profile in model.profiles.values():
            n = slices_for_fraction(model.gpu_fraction(profile))
            out[profile.resource_name] = max(n, out.get(profile.resource_name, 0))
    return dict(sorted(out.items()))


def kueue_transformations(models: Iterable[facts.GpuModel] | None = None) -> list[dict]:
    """The `resources.transformations` of Kueue's Configuration for slice quotas: each GPU
    resource replaced by its slices (the pod keeps its own request; only Kueue's accounting
    changes)."""
    return [
        {"input": name, "strategy": "Replace", "outputs": {SLICE_RESOURCE: str(n)}}
        for name, n in resource_slices(models).items()
    ]


def describe(slices: int) -> str:
    """`16` -> `2 GPUs + 2 slices`; `7` -> `1 GPU`; `3` -> `3 slices`."""
    whole, rest = divmod(max(0, slices), SLICES_PER_GPU)
    parts = []
    if whole:
        parts.append(f"{whole} GPU" + ("s" if whole != 1 else ""))
    if rest or not parts:
        parts.append(f"{rest} slice" + ("s" if rest != 1 else ""))
    return " + ".join(parts)


def shape(rc: ClassLike) -> str:
    """A class as a shape: `3g.40gb`, `whole GPU`, `shared replica`."""
    if rc.kind == "mig":
        return rc.profile
    return "whole GPU" if rc.kind == "whole" else "shared replica"


def slices_of(count: int, total: int | None = None) -> str:
    """`3 of 12 slices`; without a total, `3 slices` (`1 slice`)."""
    if total is None:
        return f"{count} slice" + ("" if count == 1 else "s")
    return f"{count} of {total} slice" + ("" if total == 1 else "s")


def units_in_slices(units: int, rc: ClassLike, of: int | None = None) -> str:
    """The one way a number of a class's units is shown (issue 49, 4): the instances and the
    compute slices they are, of `of` slices where a total is meant (a team's grant of the
    model, a pool): `4 × 1g.10gb (= 4 of 14 slices)`, `2 × whole GPU (= 14 slices)`."""
    return f"{units} × {shape(rc)} (= {slices_of(units * slices_per_unit(rc), of)})"


def model_allowance(classes: Iterable, granted: dict[int, int]) -> tuple[int, int]:
    """(slices granted, slices that may be borrowed beyond them) of one model's classes (each
    with its `pool`, or none: nothing to borrow), as its queue line renders them: the widest of
    the pools' borrowing limits in slices; with no limit, at most the model's capacity."""
    classes = list(classes)
    have = sum(granted.get(rc.pk, 0) * slices_per_unit(rc) for rc in classes)
    pools = [(rc, p) for rc in classes if (p := getattr(rc, "pool", None)) is not None]
    if not pools:
        return have, 0
    if any(p.borrowing_limit is None for _, p in pools):
        capacity = sum(p.capacity * slices_per_unit(rc) for rc, p in pools)
        return have, max(0, capacity - have)
    return have, max(p.borrowing_limit * slices_per_unit(rc) for rc, p in pools)
