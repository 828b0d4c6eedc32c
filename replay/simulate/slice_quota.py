"""GPU-equivalent quotas for the rows from f: grants in compute slices, one quota line per
model, Kueue's transformations turning each request into slices.

Read from the portal's pure code (`catalog.slices`): the quota resource
(`SLICE_RESOURCE`), each resource class's slices (`slices_per_unit`, over the catalog's own
classes of the model: a whole GPU 7, a MIG g-profile g, a shared replica its fraction rounded
up, 2 at 4 replicas) and the Configuration's `resources.transformations`
(`kueue_transformations`). Restated here until the portal renders them (the product change
of issue 29): the teams' slice grants (`grants`: the slices the layouts supply, split by mean
demand with `split_supply`), the quota lines (`lines`), and on the rendered ClusterQueue
(`what_if_queue`) an omitted `borrowingLimit` for unlimited borrowing and `fairSharing.weight`
1 per team.
"""

from __future__ import annotations

import math
from copy import deepcopy
from functools import cache

from catalog import facts, slices
from catalog.models import ResourceClass
from catalog.services import catalog_resource_classes
from replay.simulate import kueue as kq
from replay.workload import Policy, Window, largest_asks, mean_demand, split_supply
from scheduler.cluster.render.specs import QueueLine

SLICES = slices.SLICE_RESOURCE
FAIR_WEIGHT = 1  # every team alike: the fairness metric's fair share is an equal split


@cache
def _unit_slices(model_key: str) -> dict[str, int]:
    model = facts.get_model(model_key)
    return {
        f["slug"]: slices.slices_per_unit(ResourceClass(**f))
        for f in catalog_resource_classes(model)
    }


def unit_slices(slug: str, model: facts.GpuModel) -> int:
    """The slices one unit of a resource class counts for, as the portal counts them."""
    return _unit_slices(model.key)[slug]


def transformations(model: facts.GpuModel) -> kq.Transformations:
    """The portal's `kueue_transformations` for the model: every resource it may advertise,
    as the Configuration has them (an ask for a profile the layouts lack today is admitted in
    slices and waits for a node that offers it, which elastic layouts may make)."""
    return kq.transformations_of(slices.kueue_transformations([model]))


def grants(
    window: Window, policy: Policy, model: facts.GpuModel, supply: dict[str, int]
) -> dict[int, int]:
    """Each team's grant in slices: the slices the layouts supply, split over the teams by
    their mean demand in slices, each at least its largest single ask where the others can
    spare it (classes the layouts lack count in the demand too)."""
    demand: dict[tuple[int, str], float] = {}
    for (team, slug), units in mean_demand(window, policy, model).items():
        demand[(team, SLICES)] = demand.get((team, SLICES), 0.0) + units * unit_slices(slug, model)
    largest: dict[tuple[int, str], int] = {}
    for (team, slug), units in largest_asks(window, policy, model).items():
        need = math.ceil(units * unit_slices(slug, model))
        largest[(team, SLICES)] = max(largest.get((team, SLICES), 0), need)
    total = sum(n * unit_slices(slug, model) for slug, n in supply.items())
    split = split_supply(demand, {SLICES: total}, largest)
    return {team: n for (team, _), n in split.items()}


def lines(model: facts.GpuModel, grant: int, capacity: int, borrowing: bool) -> tuple[QueueLine]:
    """One quota line for the model: nominal the grant, borrowing up to the pool (from d's
    borrowing on; `what_if_queue` drops the limit for unlimited borrowing), idle slices lent."""
    line = QueueLine(model.key.lower(), SLICES, grant, capacity if borrowing else 0, lend=True)
    return (line,)


def what_if_queue(manifest: dict, policy: Policy) -> dict:
    """The rendered ClusterQueue with what the portal does not render yet: no borrowing limit
    on the slice line (Kueue: absent is unlimited), a fair-sharing weight."""
    out = deepcopy(manifest)
    if policy.unlimited_borrowing:
        for group in out["spec"].get("resourceGroups", []):
            for flavor in group["flavors"]:
                for r in flavor["resources"]:
                    if r["name"] == SLICES:
                        r.pop("borrowingLimit", None)
    if policy.fair_sharing:
        out["spec"]["fairSharing"] = {"weight": str(FAIR_WEIGHT)}
    return out
