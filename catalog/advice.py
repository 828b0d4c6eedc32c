"""Which sharing mode fits a workload (pure), from the seed article's decision tree:

- strict isolation (memory and faults) -> MIG only; on a GPU without MIG, a whole GPU;
- inference -> a MIG slice, or time-slicing where the model has no MIG;
- training -> MPS (several processes on one GPU, each with a share) or a whole GPU;
- no MIG on this model -> time-slicing or MPS.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from catalog import facts

WORKLOADS = ("inference", "training")


@dataclass(frozen=True)
class Advice:
    workload: str
    mode: str  # "mig", "time-slicing", "mps" or "whole"
    resource_class: str  # the class slug to ask for
    reason: str


def sharing_advice(
    *,
    model_key: str,
    workload: str | None = None,
    strict_isolation: bool = False,
    offered: Collection[str] | None = None,
) -> list[Advice]:
    """Suggestions in order of preference; for both workloads when `workload` is None. With
    `offered` (the class slugs a pool has), a suggestion of any other class is left out: advice
    to ask for what cannot be granted is no advice."""
    found = _advice(model_key=model_key, workload=workload, strict_isolation=strict_isolation)
    if offered is None:
        return found
    return [a for a in found if a.resource_class in offered]


def _advice(*, model_key: str, workload: str | None, strict_isolation: bool) -> list[Advice]:
    model = facts.get_model(model_key)
    kinds = [workload] if workload in WORKLOADS else list(WORKLOADS)
    smallest = min(
        (p for p in model.profiles.values() if not p.media_extensions),
        key=lambda p: (p.compute_slices, p.memory_slices),
        default=None,
    )
    # Slugs spelt by the catalog's one spelling, never here.
    whole, shared = facts.class_slug(model, "whole"), facts.class_slug(model, "shared")
    mig = facts.class_slug(model, "mig", smallest.name) if smallest else ""
    out: list[Advice] = []
    for kind in kinds:
        if strict_isolation:
            if model.mig_capable and smallest:
                out.append(
                    Advice(
                        kind,
                        "mig",
                        mig,
                        "MIG gives each instance its own memory and faults: the only sharing "
                        "with strict isolation; pick the smallest profile that fits",
                    )
                )
            else:
                out.append(
                    Advice(
                        kind,
                        "whole",
                        whole,
                        f"{model.key} has no MIG, and time-slicing or MPS share memory: "
                        "ask for whole GPUs",
                    )
                )
            continue
        if kind == "inference":
            if model.mig_capable and smallest:
                out.append(
                    Advice(
                        kind,
                        "mig",
                        mig,
                        "a MIG slice sized to the model: guaranteed memory and compute",
                    )
                )
            out.append(
                Advice(
                    kind,
                    "time-slicing",
                    shared,
                    "time-sliced replicas: cheapest for bursty, light inference; no memory "
                    "isolation",
                )
            )
        else:
            out.append(
                Advice(
                    kind,
                    "mps",
                    shared,
                    "MPS: several training processes share one GPU, each with a fixed share",
                )
            )
            out.append(Advice(kind, "whole", whole, "a whole GPU for large or long training runs"))
    return out
