"""The portal's priority classes, defined once: which a tenant may use, which a workload runs
at, and what the reconciler renders as cluster PriorityClasses."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PriorityClassDef:
    name: str
    value: int
    description: str


# The portal's priority classes, defined once: tenants are allowed some of them, workloads run
# at one, the reconciler renders them as cluster PriorityClasses.
PRIORITY_CLASS_DEFS: tuple[PriorityClassDef, ...] = (
    PriorityClassDef(
        "gpu-critical", 1_000_000, "Production inference; may preempt gpu-high and gpu-low"
    ),
    PriorityClassDef("gpu-high", 900_000, "Important training; may preempt gpu-low"),
    PriorityClassDef("gpu-low", 100_000, "Best effort and experiments; preempted first"),
)
PRIORITY_CLASSES: tuple[str, ...] = tuple(pc.name for pc in PRIORITY_CLASS_DEFS)
# The highest class may preempt every other, so a tenant runs at most `critical_gpu_quota` units
# of each GPU resource in it (as its namespace's quota counts them); the lowest is best effort,
# what a new workload is offered first.
CRITICAL_PRIORITY_CLASS: str = max(PRIORITY_CLASS_DEFS, key=lambda pc: pc.value).name
DEFAULT_PRIORITY_CLASS: str = min(PRIORITY_CLASS_DEFS, key=lambda pc: pc.value).name
