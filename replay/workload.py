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

from replay.trace import TracePod, mig_compute_slices
from scheduler.catalog import facts

SHARED_MAX_MILLI = 1000 // facts.SHARED_REPLICAS  # an ask that fits one time-sliced replica
HIGH_QOS = frozenset({"LS", "Guaranteed"})  # latency-sensitive in the trace


@dataclass(frozen=True)
class Policy:
    key: str
    title: str
    mig: bool = False
    sharing: bool = False
    borrowing: bool = False
    priority: bool = False
    claim_pts: float | None = None  # the seed article's gain for this row's technique


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


def ask(pod: ReplayPod, policy: Policy, model: facts.GpuModel) -> Ask:
    priority = "gpu-high" if policy.priority and pod.qos in HIGH_QOS else "gpu-low"
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


def size_grants(
    window: Window, policy: Policy, model: facts.GpuModel, fleet_gpus: int
) -> dict[tuple[int, str], int]:
    """Each team's grant per class: its share of the window's mean demand, scaled so that all
    grants together are worth the fleet (in GPUs: a unit is worth its slices / 7), rounded by
    largest remainder; never below the team's largest single ask of that class, so every pod
    can run some day."""
    demand = mean_demand(window, policy, model)
    per_unit = {}
    largest: dict[tuple[int, str], int] = defaultdict(int)
    for pod in window.pods:
        a = ask(pod, policy, model)
        per_unit[a.slug] = a.slices_per_unit / model.compute_slices
        largest[(pod.team, a.slug)] = max(largest[(pod.team, a.slug)], a.units)
    total = sum(units * per_unit[slug] for (_, slug), units in demand.items())
    if total <= 0:
        return {}
    scale = fleet_gpus / total
    exact = {key: units * scale for key, units in demand.items()}
    grants = {key: math.floor(v) for key, v in exact.items()}
    budget = fleet_gpus - sum(grants[k] * per_unit[k[1]] for k in grants)
    for key in sorted(exact, key=lambda k: (grants[k] - exact[k], k)):  # largest remainder
        if budget >= per_unit[key[1]] - 1e-9:
            grants[key] += 1
            budget -= per_unit[key[1]]
    return {key: max(units, largest[key]) for key, units in grants.items()}
