"""What the over-time replay runs (pure: no Django, no cluster): a window of the trace, its pods
split over teams, each pod's ask under each policy, and the teams' grants.

The policies are cumulative, as the seed article lists its techniques:

- a. static quotas, whole GPUs only: every GPU pod asks whole GPUs (a fractional ask takes one);
- b. + MIG: a fractional ask takes the MIG slice its compute share rounds up to (REPLAY.md's
  mapping; a share that needs all 7 slices asks a whole GPU), on layouts the planner proposes
  for the teams' grants and the portal rolls out;
- c. + time-slicing: asks of at most a quarter GPU take a time-sliced replica (4 per GPU) on the
  nodes the platform team turns to time-slicing (enough for those grants);
- d. + borrowing: teams borrow each other's idle units in the Kueue cohort;
- e. + priority: the trace's latency-sensitive pods (`LS`) run as `gpu-high`, the rest as
  `gpu-low`; lenders reclaim borrowed units by preemption, and within a team high preempts low.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass

from catalog import facts
from replay.trace import TracePod, mig_compute_slices

SHARED_MAX_MILLI = 1000 // facts.SHARED_REPLICAS  # an ask that fits one time-sliced replica
HIGH_QOS = frozenset({"LS", "Guaranteed"})  # latency-sensitive in the trace
GUARANTEED_QOS = "Guaranteed"


@dataclass(frozen=True)
class Policy:
    key: str
    title: str
    mig: bool = False
    sharing: bool = False
    borrowing: bool = False
    priority: bool = False
    slices: bool = False  # GPU-equivalent grants in compute slices: the simulator's what-if only
    claim_pts: float | None = None  # the seed article's gain for this row's technique
    # The simulator's rows g…j only (`replay/simulate/rows.py`): the policies, modelled
    # before the portal renders them.
    unlimited_borrowing: bool = False  # borrowingLimit omitted (Kueue: no limit)
    fair_sharing: bool = False  # Kueue's fairSharing, weight 1 per team
    grace_s: float = 0.0  # a borrowed workload is not reclaimed before it has run this long
    victims_by_work_lost: bool = False  # reclaim the least work lost first, not lowest priority
    minority_high: bool = False  # gpu-high only for latency-sensitive shared asks (`priority_of`)
    sized_sharing: bool = False  # time-slice as many GPUs as the shared demand needs
    elastic_layouts: bool = False  # idle GPUs re-shaped for what waits (`simulate.elastic`)
    idle_suspend_s: float = 0.0  # idle workloads suspended after this long (`simulate.idle`)
    dra: bool = False  # MIG cut per pod on DRA nodes, no layouts (`simulate.dra`, issue 53)


POLICIES = {
    p.key: p
    for p in (
        Policy("a", "static quotas, whole GPUs"),
        Policy("b", "+ MIG (planner layouts)", mig=True, claim_pts=35),
        Policy("c", "+ time-slicing small asks", mig=True, sharing=True, claim_pts=25),
        Policy("d", "+ borrowing in the cohort", mig=True, sharing=True, borrowing=True),
        Policy(
            "e",
            "+ priority and reclaim",
            mig=True,
            sharing=True,
            borrowing=True,
            priority=True,
            claim_pts=15,
        ),
    )
}
COMBINED_CLAIM_PTS = 50  # the seed: all techniques together, over static quotas


@dataclass(frozen=True)
class ReplayPod:
    """One trace pod in the replay: times in trace seconds from the window's start."""

    name: str
    team: int
    arrival: float
    run: float
    num_gpu: int
    gpu_milli: int
    qos: str

    @property
    def milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def fractional(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < 1000


@dataclass(frozen=True)
class Ask:
    slug: str  # resource class
    units: int
    slices_per_unit: float  # compute slices (of 7) one unit holds
    priority: str


@dataclass(frozen=True)
class Window:
    start: int
    length: int
    pods: list[ReplayPod]
    skipped_unscheduled: int  # GPU pods the trace never ran: their run time is unknown
    carried_in: int  # pods running when the window opens: they arrive at 0 for what is left


def team_weights(teams: int) -> list[float]:
    """Uneven team sizes: Zipf-like, team i gets a share ∝ 1/(i+1) (4 teams: 48/24/16/12 %)."""
    raw = [1 / (i + 1) for i in range(teams)]
    return [w / sum(raw) for w in raw]


def select_window(
    pods: list[TracePod], *, length: int, end: int | None = None, teams: int = 4, seed: int = 0
) -> Window:
    """GPU pods of the trace window [end − length, end) (end: the last arrival + 1 by default),
    plus those still running when it opens, each given to a team by a seeded draw."""
    gpu = [p for p in pods if p.num_gpu > 0]
    if not gpu:
        raise ValueError("the trace has no GPU pods")
    if not all(p.timed for p in gpu):
        raise ValueError("the pod list has no creation_time: a replay over time needs its times")
    if length <= 0:
        raise ValueError("the window must be at least one second long")
    end = end if end is not None else max(p.creation for p in gpu) + 1
    start = end - length
    rng = random.Random(seed)
    weights = team_weights(teams)
    chosen, skipped, carried = [], 0, 0
    for pod in sorted(gpu, key=lambda p: (p.creation, p.name)):
        team = rng.choices(range(teams), weights)[0]  # drawn for every pod: stable per seed
        if pod.scheduled is None:
            skipped += pod.creation >= start and pod.creation < end
            continue
        finish = pod.deletion if pod.deletion is not None else end
        run_end = pod.creation + max(0, finish - pod.scheduled)  # its run, from arrival
        if pod.creation >= end or run_end <= start:
            continue
        if pod.creation < start:
            arrival, run = 0.0, float(run_end - start)
            carried += 1
        else:
            arrival, run = float(pod.creation - start), float(run_end - pod.creation)
        chosen.append(ReplayPod(pod.name, team, arrival, run, pod.num_gpu, pod.gpu_milli, pod.qos))
    return Window(start, length, chosen, skipped, carried)


def mig_profile(model: facts.GpuModel, compute_slices: int) -> str:
    """The profile of that many compute slices with the least memory (no media extensions)."""
    fits = [
        p
        for p in model.profiles.values()
        if p.compute_slices == compute_slices and "+me" not in p.name
    ]
    if not fits:
        raise ValueError(f"{model.key} has no MIG profile of {compute_slices} compute slices")
    return min(fits, key=lambda p: (p.memory_slices, p.name)).name


def priority_of(pod: ReplayPod, policy: Policy) -> str:
    """The priority class a pod runs at. Part 1's rule (e): every latency-sensitive pod is
    `gpu-high`, 70 % of the default window's pods, so high means little. The minority rule
    (row i): only what a person would call urgent at submit time is high, the latency-sensitive
    pods that share a GPU (the trace's inference-sized asks, 8 % of that window's pods) and
    `Guaranteed` ones; whole-GPU latency-sensitive pods, `BE` and `Burstable` are `gpu-low`."""
    if not policy.priority:
        return "gpu-low"
    if policy.minority_high:
        urgent = pod.qos == GUARANTEED_QOS or (pod.qos in HIGH_QOS and pod.fractional)
        return "gpu-high" if urgent else "gpu-low"
    return "gpu-high" if pod.qos in HIGH_QOS else "gpu-low"


def ask(pod: ReplayPod, policy: Policy, model: facts.GpuModel) -> Ask:
    priority = priority_of(pod, policy)
    whole = facts.class_slug(model, "whole")
    full = float(model.compute_slices)
    if not pod.fractional:
        return Ask(whole, pod.num_gpu, full, priority)
    if policy.sharing and pod.gpu_milli <= SHARED_MAX_MILLI:
        shared = facts.class_slug(model, "shared")
        return Ask(shared, 1, full / facts.SHARED_REPLICAS, priority)
    if policy.mig and model.mig_capable:
        g = mig_compute_slices(pod.gpu_milli, model.compute_slices)
        if g < model.compute_slices:
            slug = facts.class_slug(model, "mig", mig_profile(model, g))
            return Ask(slug, 1, float(g), priority)
    return Ask(whole, 1, full, priority)


def mean_demand(
    window: Window, policy: Policy, model: facts.GpuModel
) -> dict[tuple[int, str], float]:
    """Mean units held per (team, class) over the window if every pod ran when it arrived."""
    held: dict[tuple[int, str], float] = defaultdict(float)
    for pod in window.pods:
        a = ask(pod, policy, model)
        overlap = max(0.0, min(pod.arrival + pod.run, window.length) - pod.arrival)
        held[(pod.team, a.slug)] += a.units * overlap / window.length
    return dict(held)


def unit_gpus(slug: str, model: facts.GpuModel) -> float:
    """What one unit of a class is worth in GPUs (its compute slices over the GPU's)."""
    if slug == facts.class_slug(model, "shared"):
        return 1 / facts.SHARED_REPLICAS
    for profile in model.profiles.values():
        if slug == facts.class_slug(model, "mig", profile.name):
            return profile.compute_slices / model.compute_slices
    return 1.0


def largest_asks(
    window: Window, policy: Policy, model: facts.GpuModel
) -> dict[tuple[int, str], int]:
    largest: dict[tuple[int, str], int] = defaultdict(int)
    for pod in window.pods:
        a = ask(pod, policy, model)
        largest[(pod.team, a.slug)] = max(largest[(pod.team, a.slug)], a.units)
    return dict(largest)


def fleet_demand(
    demand: dict[tuple[int, str], float], model: facts.GpuModel, gpus: int
) -> dict[str, int]:
    """What the platform team asks the planner for: the classes' mean demand summed over teams,
    scaled so that it is worth `gpus` GPUs (rounded up: a class asked for never vanishes)."""
    totals: dict[str, float] = defaultdict(float)
    for (_, slug), units in demand.items():
        totals[slug] += units
    worth = sum(units * unit_gpus(slug, model) for slug, units in totals.items())
    if worth <= 0:
        return {}
    return {slug: math.ceil(units * gpus / worth) for slug, units in totals.items() if units > 0}


def split_supply(
    demand: dict[tuple[int, str], float],
    supply: dict[str, int],
    largest: dict[tuple[int, str], int],
) -> dict[tuple[int, str], int]:
    """The grants: each class's supply split over the teams by their share of its mean demand
    (largest remainder), then moved, a unit at a time, from the teams with the most to spare to
    any team whose grant is below its largest single ask, so that every pod can run some day
    under a static quota. What cannot be moved stays short (those pods are refused: counted)."""
    grants: dict[tuple[int, str], int] = {}
    for slug in sorted({s for _, s in demand}):
        keys = sorted(k for k in demand if k[1] == slug and demand[k] > 0)
        total, units = sum(demand[k] for k in keys), supply.get(slug, 0)
        if not keys or total <= 0:
            continue
        exact = {k: units * demand[k] / total for k in keys}
        share = {k: math.floor(v) for k, v in exact.items()}
        for k in sorted(keys, key=lambda k: (share[k] - exact[k], k))[
            : units - sum(share.values())
        ]:
            share[k] += 1
        for k in sorted(keys, key=lambda k: -largest.get(k, 0)):
            while share[k] < largest.get(k, 0):
                donors = [d for d in keys if d != k and share[d] > max(largest.get(d, 0), 0)]
                if not donors:
                    break
                donor = max(donors, key=lambda d: (share[d] - largest.get(d, 0), d))
                share[donor] -= 1
                share[k] += 1
        grants.update(share)
    return grants


def time_sliced_nodes(
    demand: dict[tuple[int, str], float], shared_slug: str, nodes: int, gpus_per_node: int
) -> int:
    """Nodes to time-slice for the shared asks' mean demand: the device plugin's sharing is
    per node, so whole nodes, at least one when anything asks, never all."""
    units = sum(n for (_, slug), n in demand.items() if slug == shared_slug)
    per_node = gpus_per_node * facts.SHARED_REPLICAS
    return min(nodes - 1, max(1, round(units / per_node))) if units > 0 else 0
