"""What a GPU may be and what it offers (pure): the planner's shapes, fleet state, policy and
result, and the weights of the resource classes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from typing import NamedTuple

from catalog import facts
from catalog.facts import class_slug

WEIGHT_SCALE = 28  # weights in 28ths of a GPU: 1g = 4, whole = 28, shared replica = 7


class Shape(NamedTuple):
    """What one GPU is: `mig` with a multiset of profiles, `whole`, or `shared` replicas."""

    mode: str
    devices: tuple[tuple[str, int], ...] = ()
    replicas: int = 1

    @classmethod
    def mig(cls, devices: dict[str, int]) -> Shape:
        return cls("mig", tuple(sorted((k, v) for k, v in devices.items() if v)))

    def label(self) -> str:
        if self.mode == "mig":
            return " + ".join(f"{n}×{p}" if n > 1 else p for p, n in self.devices) or "MIG, empty"
        if self.mode == "shared":
            return f"shared ×{self.replicas}"
        return "whole"


WHOLE = Shape("whole")


@dataclass(frozen=True)
class GpuState:
    node: str
    index: int
    model: str  # catalog key
    shape: Shape
    busy: tuple[tuple[str, int], ...] = ()  # class slug -> units held by running pods
    pods: tuple[str, ...] = ()  # "namespace/name" of pods holding this GPU


@dataclass(frozen=True)
class Policy:
    allow_draining: bool = False
    large_shape_weight: float = 0.0  # bonus per GPU-equivalent of surplus in big shapes
    sharing: str = "time-slicing"  # or "mps": how non-MIG GPUs are shared
    # Replicas per shared GPU: a shared class unit is 1/4 GPU, so 4 unless asked otherwise.
    replica_options: tuple[int, ...] = (facts.SHARED_REPLICAS,)
    nodes: frozenset[str] | None = None  # plan only these nodes; None: all
    # Serve at least this much (GPU-equivalents) instead of the most: for comparisons.
    serve_at_least: float | None = None
    polish_seconds: float = 0.25  # time box for objective 3 (the first two are always exact)
    # `plan_greedy` only: change at most this many GPUs (a disruption budget); None: no limit.
    max_changed: int | None = None


@dataclass
class PlanResult:
    method: str
    proposed: dict[tuple[str, int], Shape]  # (node, gpu index) -> shape
    demand: dict[str, int]
    supply_before: dict[str, int]
    supply_after: dict[str, int]
    served: dict[str, int]
    unserved: dict[str, int]
    changed: list[tuple[str, int]]
    disturbed_pods: list[str]
    solve_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def served_weight(self) -> float:
        return sum(class_weight(c) * n for c, n in self.served.items()) / WEIGHT_SCALE


@cache
def _class_weights() -> dict[str, int]:
    weights = {}
    for model in facts.load_catalog().values():
        weights[class_slug(model, "whole")] = WEIGHT_SCALE
        weights[class_slug(model, "shared")] = WEIGHT_SCALE // facts.SHARED_REPLICAS
        for p in model.profiles.values():
            weights[class_slug(model, "mig", p.name)] = (
                WEIGHT_SCALE * p.compute_slices // model.compute_slices
            )
    return weights


def class_weight(slug: str) -> int:
    return _class_weights().get(slug, 0)


def units_of(model: facts.GpuModel, shape: Shape) -> dict[str, int]:
    """Units of each resource class one GPU in this shape offers."""
    if shape.mode == "mig":
        return {class_slug(model, "mig", p): n for p, n in shape.devices}
    if shape.mode == "shared":
        return {class_slug(model, "shared"): shape.replicas}
    return {class_slug(model, "whole"): 1}


def instance_units(model: facts.GpuModel, shape: Shape) -> list[str]:
    """The shape's units one by one, in the order busy units are assumed to take them."""
    return [c for c, n in units_of(model, shape).items() for _ in range(n)]


@cache
def candidate_shapes(model_key: str, sharing: str, replicas: tuple[int, ...]) -> tuple[Shape, ...]:
    """What a GPU of this model may become: every maximal packable multiset of its profiles
    (without media extensions) and whole; non-MIG models: whole or shared."""
    model = facts.get_model(model_key)
    if not model.mig_capable:
        return (WHOLE, *(Shape("shared", (), r) for r in replicas))
    profiles = [p for p in model.profiles if "+me" not in p]
    multisets = sorted(facts.maximal_multisets(model, profiles))
    return (WHOLE, *(Shape("mig", tuple(m)) for m in multisets))


def supply(gpus: list[GpuState], shapes: dict[tuple[str, int], Shape] | None = None) -> Counter:
    total: Counter = Counter()
    for g in gpus:
        shape = shapes.get((g.node, g.index), g.shape) if shapes else g.shape
        total.update(units_of(facts.get_model(g.model), shape))
    return total
