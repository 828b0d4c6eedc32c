"""Ask by need, not by profile: "at least 20 GB of GPU memory" or "at least 3 compute slices"
of a model, and the portal chooses the shape (issue 30).

The choice is a plain rule over the catalog's classes of the model: the MIG profiles (media
extensions left out: nobody asks for a decoder by memory) and the whole GPU that meet the need;
among them one a node has free now, else the cheapest to make, fewest compute slices first
(what the team's grant in slices is charged), then least memory. Elastic layouts make a shape
the layout lacks once the ask has waited (`scheduler.mig.elastic`).
"""

from __future__ import annotations

from collections.abc import Mapping

from catalog import facts
from catalog.services import catalog_resource_classes
from core.errors import InvalidInput
from scheduler.workloads import selectors


def _candidates(model: facts.GpuModel) -> list[tuple[str, int, int]]:
    """(class slug, compute slices, memory GB) of every shape a pod of the model may ask."""
    out = [(facts.class_slug(model, "whole"), model.compute_slices, model.memory_gb)]
    known = {c["slug"] for c in catalog_resource_classes(model)}
    for p in model.profiles.values():
        slug = facts.class_slug(model, "mig", p.name)
        if not p.media_extensions and slug in known:
            out.append((slug, p.compute_slices, p.memory_gb))
    return out


def shape_for(
    model: facts.GpuModel,
    *,
    memory_gb: int | None = None,
    compute_slices: int | None = None,
    free: Mapping[str, int] | None = None,
) -> str:
    """The class slug to ask for; a 400 that says what the model offers when nothing meets
    the need."""
    if memory_gb is None and compute_slices is None:
        raise InvalidInput(
            "say what the workload needs: gpu_memory_gb, compute_slices or both", field="need"
        )
    fits = [
        (slug, slices, memory)
        for slug, slices, memory in _candidates(model)
        if (memory_gb is None or memory >= memory_gb)
        and (compute_slices is None or slices >= compute_slices)
    ]
    if not fits:
        raise InvalidInput(
            f"no shape of {model.key} has that much: a whole GPU is {model.compute_slices} "
            f"compute slices and {model.memory_gb} GB; ask for less, or another model",
            field="need",
        )
    free = free or {}
    return min(fits, key=lambda c: (free.get(c[0], 0) <= 0, c[1], c[2], c[0]))[0]


def resources_for(need: Mapping) -> dict[str, int]:
    """`resources` (class slug -> units per pod) for a need: its model, memory and slices per
    pod, and `units` per pod (default 1); the fleet's free units read from the inventory."""
    try:
        model = facts.get_model(str(need.get("gpu_model", "")))
    except facts.UnknownModel:
        known = ", ".join(sorted(facts.load_catalog()))
        raise InvalidInput(f"need.gpu_model must be one of {known}", field="need") from None
    offers = selectors.fleet_offers() or {}
    free = {slug: sum(offer.free) for slug, offer in offers.items()}
    slug = shape_for(
        model,
        memory_gb=need.get("gpu_memory_gb"),
        compute_slices=need.get("compute_slices"),
        free=free,
    )
    return {slug: int(need.get("units") or 1)}
