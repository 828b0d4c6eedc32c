"""The rows: row 0 (the fleet the seed's 30–40 % describes), the policies a…e and the what-ifs
f…m, each on the default fleet and on the smallest fleet that carries the trace.

Row 0: each team on dedicated whole GPUs sized to its own peak (every pod on whole GPUs from
the moment it arrives: no queue, no sharing, no waiting). Computed directly, not simulated:
with a GPU for every concurrent ask there is nothing to decide.

A fleet *carries* the trace when no job is refused or left unstarted (`DRAIN_LIMIT_S`
after the window), the 95th percentile of queue wait is at most `WAIT_LIMIT_S` (30 trace
minutes) and every team holds at least `FAIR_FRACTION` of min(its demand, its fair share): demand is
what it would hold had every pod run on arrival, the fair share its max-min share of the fleet
(water-filling the fleet's GPUs over the teams' demands), both in GPU-equivalents averaged over
the window. A larger fleet does not always carry more (the grants are re-split at each size),
so the search (`smallest_carrying`) bisects over whole nodes for an upper bound, then tries
every size from the fleet whose GPUs equal the window's mean demand up to that bound and keeps
the first that carries. The scan tries at most `SCAN_BUDGET` new sizes per row; when that runs
out the answer is the smallest found so far and is reported as not exhaustive. Below the mean
demand no size is tried (such a fleet would have to push work past the window). A probe
records each size tried; a probe's simulation stops once its p95 wait is sure to fail.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from catalog import facts
from replay.simulate import idle
from replay.simulate.engine import Harness, Result
from replay.simulate.fleet import Fleet, Setup, set_up, simulate
from replay.workload import POLICIES, Policy, Window, ask

WAIT_LIMIT_S = 30 * 60
WAIT_QUANTILE = 0.95
FAIR_FRACTION = 0.9
MAX_NODES_FACTOR = 4  # the search gives up above this many times row 0's nodes
SCAN_BUDGET = 12  # the scan below the bisection's answer tries at most this many new sizes
GRACE_S = 10 * 60  # the product's default minimum run before reclaim, in trace time
IDLE_SUSPEND_S = 30 * 60  # row l: idle this long (warned first), then suspended


def _what_if() -> dict[str, Policy]:
    """The simulator's own rows, each building on the one before: quotas in slices built here
    (`slice_quota`), Kueue's fair sharing and the reclaim policy modelled before the portal
    renders them (issue 29)."""
    f = Policy(
        "f",
        "what-if, not rendered by the portal: GPU-equivalent grants (slices) + lending",
        mig=True,
        sharing=True,
        borrowing=True,
        slices=True,
    )
    g = replace(f, key="g", title="f + unlimited borrowing + fair sharing (weight 1 per team)",
                unlimited_borrowing=True, fair_sharing=True)  # fmt: skip
    h = replace(g, key="h", title="g + reclaim after a 10 min grace, victims by least work lost",
                grace_s=GRACE_S, victims_by_work_lost=True)  # fmt: skip
    i = replace(h, key="i", title="h + priority for a minority (fractional LS asks high)",
                priority=True, minority_high=True)  # fmt: skip
    j = replace(i, key="j", title="i + time-slicing sized to the shared demand (GPUs, not nodes)",
                sized_sharing=True)  # fmt: skip
    k = replace(j, key="k", title="j + layouts that follow the queue (idle GPUs re-shaped for "
                "asks waiting 10 min, at most 4 GPUs an hour)", elastic_layouts=True)  # fmt: skip
    l_ = replace(k, key="l", title="k + idle GPUs given back after 30 min idle (assumed: the "
                 "last 20 % of every run idle; the trace has no use signal)",
                 idle_suspend_s=IDLE_SUSPEND_S)  # fmt: skip
    # Row m: i's queues on DRA nodes (issue 53): neither j's time-slicing (Kueue v0.19 refuses
    # shared claims, so a small ask takes a 1g or 2g) nor k's layouts (each pod's placement
    # is cut on demand).
    m = replace(k, key="m", title="i on DRA: each MIG ask placed on demand within its GPU's "
                "counters (first fit), no layouts, drains or rollouts; small asks as MIG",
                sharing=False, sized_sharing=False, elastic_layouts=False, dra=True)  # fmt: skip
    return {p.key: p for p in (f, g, h, i, j, k, l_, m)}


WHAT_IF = _what_if()
ROWS = {**POLICIES, **WHAT_IF}
# The rows part 1 can also run on the local cluster through the portal as it is: there every
# row's quota is one line of slices per model (the classes' grants folded: GPU_QUOTA_UNIT's
# default) and Kueue shares fairly (its Configuration), so f is d there; g's unlimited
# borrowing, h's grace (the portal's reclaim controller) and i's priorities are settings the
# portal has. Not j (the cluster replay time-slices whole nodes), k (the elastic controller is
# not run at the replay's pace), l (an assumed idle tail) or m (DRA nodes).
CLUSTER_ROWS = {k: ROWS[k] for k in "abcdeghi"}


@dataclass
class RowZero:
    gpus: int
    per_team: dict[int, int]
    alloc_milli: float
    alloc_slices: float


@dataclass
class Row:
    policy: Policy
    default: Result
    setup: Setup
    carrying_nodes: int | None = None
    carrying: Result | None = None
    probes: list[tuple[int, bool]] = field(default_factory=list)
    exhaustive: bool = True  # every size from the floor to carrying_nodes was tried


def row_zero(window: Window, model: facts.GpuModel) -> RowZero:
    """Dedicated whole GPUs per team, sized to the team's peak of concurrent asks."""
    a = POLICIES["a"]
    events: dict[int, list[tuple[float, int]]] = {}
    milli = slices = 0.0
    T = window.length
    for pod in window.pods:
        units = ask(pod, a, model).units
        end = min(pod.arrival + pod.run, T)
        if end <= pod.arrival:
            continue
        events.setdefault(pod.team, []).extend([(pod.arrival, units), (end, -units)])
        milli += pod.milli * (end - pod.arrival)
        slices += units * (end - pod.arrival)
    peaks = {}
    for team, evs in events.items():
        level = peak = 0
        for _, delta in sorted(evs, key=lambda e: (e[0], e[1])):  # ends before starts
            level += delta
            peak = max(peak, level)
        peaks[team] = peak
    gpus = sum(peaks.values())
    span = gpus * T
    return RowZero(
        gpus, peaks, milli / 1000 / span if span else 0.0, slices / span if span else 0.0
    )


def fair_shares(demand: dict[int, float], capacity: float) -> dict[int, float]:
    """Max-min fair shares of `capacity` over the demands (water-filling)."""
    shares = dict.fromkeys(demand, 0.0)
    left, open_ = capacity, sorted(demand, key=lambda t: demand[t])
    while open_ and left > 1e-12:
        even = left / len(open_)
        t = open_[0]
        if demand[t] <= even:
            shares[t], left = demand[t], left - demand[t]
            open_.pop(0)
        else:
            for t in open_:
                shares[t] = even
            left = 0.0
    return shares


def fairness(result: Result) -> dict[int, float]:
    """Each team's GPU-equivalents held ÷ min(its demand, its fair share), time-averaged over
    the window; the fair share is `fair_shares` of the fleet's GPUs (an equal split over the
    teams with demand, what a team needs less of going to the others: weight 1 each, as the
    rows with fair sharing configure Kueue). A team with no demand counts as 1."""
    fair = fair_shares(result.team_demand, result.fleet_gpus)
    out = {}
    for team, demand in sorted(result.team_demand.items()):
        owed = min(demand, fair[team])
        out[team] = result.team_held.get(team, 0.0) / owed if owed > 0 else 1.0
    return out


def shortfalls(result: Result) -> list[str]:
    """Why a fleet does not carry the trace; empty when it does."""
    why = []
    if result.refused or result.never_started:  # work the fleet does not carry at all
        why.append(f"{result.refused} refused, {result.never_started} never started")
    wait = result.wait(WAIT_QUANTILE)
    if wait > WAIT_LIMIT_S:
        why.append(f"p95 wait {wait / 60:.0f} min" if math.isfinite(wait) else "p95 never")
    fair = fair_shares(result.team_demand, result.fleet_gpus)
    for team, demand in sorted(result.team_demand.items()):
        owed = FAIR_FRACTION * min(demand, fair[team])  # `fairness` below FAIR_FRACTION
        if result.team_held.get(team, 0.0) < owed - 1e-9:
            why.append(f"team {team + 1} {result.team_held.get(team, 0.0):.1f} < {owed:.1f} GPUs")
    return why


def run_row(
    window: Window,
    policy: Policy,
    fleet: Fleet,
    teams: int,
    harness: Harness,
    seed: int,
    fair_sharing: bool = False,
    give_up: tuple[float, float] | None = None,
) -> tuple[Setup, Result]:
    window = idle.given_back(window, policy.idle_suspend_s)  # row l: runs cut by the policy
    setup = set_up(window, policy, fleet, teams)
    return setup, simulate(window, setup, harness, seed, give_up, fair_sharing=fair_sharing)


@dataclass
class Search:
    """What the carrying-fleet search found: the smallest size that carried, and whether every
    size from the floor up to it was tried (False: the scan ran out of `SCAN_BUDGET`)."""

    nodes: int | None
    complete: bool


def smallest_carrying(
    ok: Callable[[int], bool],
    start: int,
    limit: int,
    floor: int = 1,
    budget: int = SCAN_BUDGET,
) -> Search:
    """The smallest size `ok` accepts, with `ok` not assumed monotone: doubling up from `start`
    until one is accepted (none past `limit`), bisection below it, then a scan upward from
    `floor` to the bisection's answer that stops at the first size accepted, trying at most
    `budget` sizes not tried before (each size asked once: cached)."""
    seen: dict[int, bool] = {}

    def test(n: int) -> bool:
        if n not in seen:
            seen[n] = ok(n)
        return seen[n]

    lo, hi = 0, max(1, start)  # lo: a size known not to carry
    while not test(hi):
        if hi >= limit:
            return Search(None, False)
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if test(mid):
            hi = mid
        else:
            lo = mid
    for n in range(max(1, floor), hi):
        if n not in seen:
            if budget <= 0:
                return Search(hi, False)
            budget -= 1
        if test(n):
            return Search(n, True)
    return Search(hi, True)


def carrying_fleet(
    window: Window,
    policy: Policy,
    base: Fleet,
    teams: int,
    harness: Harness,
    seed: int,
    start_nodes: int,
    fair_sharing: bool = False,
    floor_nodes: int = 1,
) -> tuple[int | None, Result | None, list[tuple[int, bool]], bool]:
    """The smallest node count that carries the trace (`smallest_carrying`), from
    `start_nodes` up to MAX_NODES_FACTOR times it, never below `floor_nodes`; and whether
    every size from the floor to it was tried."""
    probes: list[tuple[int, bool]] = []
    results: dict[int, Result] = {}

    def ok(nodes: int) -> bool:
        fleet = Fleet(nodes, base.gpus_per_node, base.model)
        # a size whose p95 wait is sure to fail is not simulated to the end: cheap below
        _, result = run_row(
            window, policy, fleet, teams, harness, seed, fair_sharing,
            give_up=(WAIT_LIMIT_S, WAIT_QUANTILE),
        )  # fmt: skip
        results[nodes] = result
        good = not shortfalls(result)
        probes.append((nodes, good))
        return good

    start = max(1, start_nodes)
    found = smallest_carrying(ok, start, MAX_NODES_FACTOR * start, floor_nodes)
    carrying = None if found.nodes is None else results[found.nodes]
    return found.nodes, carrying, probes, found.complete


def all_rows(
    window: Window,
    policies: str,
    fleet: Fleet,
    teams: int,
    harness: Harness,
    seed: int,
    *,
    search: bool = True,
    fair_sharing: bool = False,
    progress: Callable[[str], None] = print,
) -> tuple[RowZero, list[Row]]:
    """Row 0 and the policies' rows; `fair_sharing` as if Kueue's Configuration enabled it
    (the portal's does not: a what-if)."""
    model = facts.get_model(fleet.model)
    zero = row_zero(window, model)
    start = math.ceil(zero.gpus / fleet.gpus_per_node)
    rows = []
    for key in policies:
        policy = ROWS[key]
        setup, result = run_row(window, policy, fleet, teams, harness, seed, fair_sharing)
        row = Row(policy, result, setup)
        if search:
            floor = math.ceil(sum(result.team_demand.values()) / fleet.gpus_per_node)
            row.carrying_nodes, row.carrying, row.probes, row.exhaustive = carrying_fleet(
                window, policy, fleet, teams, harness, seed, start, fair_sharing, floor
            )
        probes = ", ".join(f"{n}{'✓' if good else '✗'}" for n, good in row.probes)
        progress(
            f"[{key}] {fleet.nodes} nodes: {result.alloc_milli:.1%} by milli"
            + (
                f"; carries at {row.carrying_nodes} nodes (tried {probes}"
                + ("" if row.exhaustive else f"; scan stopped after {SCAN_BUDGET} new sizes")
                + ")"
                if search
                else ""
            )
        )
        rows.append(row)
    return zero, rows
