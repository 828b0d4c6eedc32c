"""Issue 29's goals, row by row: allocation on the smallest carrying fleet, that fleet against
row 0's, every team's share against min(its demand, its fair share), and what preemption cost;
and issue 53's for the DRA row (`dra_goal`).

The goals: at least `ALLOC_GOAL` allocation by requested milli on the smallest fleet that
carries the trace (`rows.carrying_fleet`), that fleet at most `FLEET_GOAL` × row 0's GPUs, and
every team holding at least `rows.FAIR_FRACTION` of min(its demand, its fair share)
(`rows.fairness`; a carrying fleet meets that by definition, so the table shows it on the
default fleet as well).
"""

from __future__ import annotations

import math

from catalog import facts
from replay.simulate import dra, idle, pooled
from replay.simulate.engine import Result
from replay.simulate.fleet import Fleet
from replay.simulate.rows import (
    FAIR_FRACTION,
    MAX_NODES_FACTOR,
    WAIT_LIMIT_S,
    Row,
    RowZero,
    fairness,
)
from replay.workload import Window

ALLOC_GOAL = 0.80
FLEET_GOAL = 0.65


def _teams(result: Result) -> str:
    return " / ".join(f"{v:.0%}" for _, v in sorted(fairness(result).items()))


def _waste(result: Result) -> str:
    reclaim = result.preemptions - result.in_queue_preemptions
    return f"{result.in_queue_preemptions} / {reclaim}; {result.lost_gpu_hours:,.1f}"


def verdicts(row: Row, zero: RowZero, fleet: Fleet) -> tuple[bool, bool, bool] | None:
    """(allocation, fleet size, fairness) met at the carrying fleet; None: nothing carried."""
    if row.carrying is None or row.carrying_nodes is None:
        return None
    gpus = row.carrying_nodes * fleet.gpus_per_node
    fair = all(v >= FAIR_FRACTION - 1e-9 for v in fairness(row.carrying).values())
    return row.carrying.alloc_milli >= ALLOC_GOAL, gpus <= FLEET_GOAL * zero.gpus, fair


def table(zero: RowZero, rows: list[Row], fleet: Fleet) -> str:
    head = (
        f"| row | by milli, {fleet.gpus} GPUs | teams' held ÷ min(demand, fair share), "
        f"{fleet.gpus} GPUs | preemptions in team / reclaim; GPU-h lost, {fleet.gpus} GPUs "
        "| carrying fleet, GPUs (× row 0) | by milli there | teams there | preemptions in team / "
        f"reclaim; GPU-h lost there | goals: ≥ {ALLOC_GOAL:.0%} there / ≤ {FLEET_GOAL:g} × row 0 "
        f"/ teams ≥ {FAIR_FRACTION:.0%} | GPUs re-shaped, {fleet.gpus} GPUs / there |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for row in rows:
        r = row.default
        cells = [f"{row.policy.key}", f"{r.alloc_milli:.1%}", _teams(r), _waste(r)]
        met = verdicts(row, zero, fleet)
        if met is None or row.carrying is None or row.carrying_nodes is None:
            cells += ["none found", "—", "—", "—", "no / no / no", f"{r.reshaped_gpus} / —"]
        else:
            gpus = row.carrying_nodes * fleet.gpus_per_node
            ratio = gpus / zero.gpus if zero.gpus else float("nan")
            cells += [
                f"{gpus} ({ratio:.2f}×)", f"{row.carrying.alloc_milli:.1%}",
                _teams(row.carrying), _waste(row.carrying),
                " / ".join("yes" if ok else "no" for ok in met),
                f"{r.reshaped_gpus} / {row.carrying.reshaped_gpus}",
            ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    tail = (
        f"\nFair share: the fleet's GPUs split equally over the teams with demand, a team that "
        f"needs less than its part keeping its demand and the rest split again (max-min, weight "
        f"1 per team); demand and held are GPU-equivalents averaged over the window. Row 0 has "
        f"{zero.gpus} GPUs: {FLEET_GOAL:g} × row 0 is {FLEET_GOAL * zero.gpus:.1f} GPUs.\n"
    )
    held = [f"{r.policy.key} {r.default.ping_pong}" for r in rows if r.default.ping_pong]
    if held:
        tail += (
            "Victims held back by the ping-pong guard (`kueue.PING_PONG_LIMIT`), "
            f"{fleet.gpus} GPUs: {', '.join(held)}.\n"
        )
    return head + "\n".join(lines) + "\n" + tail


def reference(window: Window, rows: list[Row], fleet: Fleet, zero: RowZero) -> str:
    """The last row's asks from one pool (`pooled`): by their shapes and by their milli, at the
    default fleet and at the fewest nodes' worth that carries them (p95 wait within the limit)."""
    if not rows:
        return ""
    policy = rows[-1].policy
    window = idle.given_back(window, policy.idle_suspend_s)  # the row's own runs
    model = facts.get_model(fleet.model)
    up_to = MAX_NODES_FACTOR * max(1, -(-zero.gpus // fleet.gpus_per_node))
    lines = [
        f"\nReference (`pooled`): row {policy.key}'s asks from one pool of GPUs, no nodes, no "
        "quotas, first come first served with backfill; sized by their shapes (what real GPUs "
        "must give) and by their milli (a perfectly divisible GPU):\n",
        f"| sized by | p95 wait, {fleet.gpus} GPUs | by milli, {fleet.gpus} GPUs | fewest GPUs "
        f"with p95 ≤ {WAIT_LIMIT_S / 60:.0f} min (× row 0) | by milli there |\n"
        "|---|---|---|---|---|",
    ]
    for by in ("shape", "milli"):
        size = pooled.sizes(window, policy, model, by)
        here = pooled.serve(window, size, fleet.gpus)
        least = pooled.smallest(window, size, fleet.gpus_per_node, WAIT_LIMIT_S, up_to)
        there = (
            f"{least.gpus} ({least.gpus / zero.gpus:.2f}×) | {least.alloc_milli:.1%}"
            if least is not None and zero.gpus
            else "none | —"
        )
        lines.append(
            f"| {by} | {here.wait_p95_s / 60:,.0f} min | {here.alloc_milli:.1%} | {there} |"
        )
    return "\n".join(lines) + "\n"


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return "never" if not math.isfinite(seconds) else f"{seconds / 60:,.0f} min"


def _carrying_gpus(row: Row, fleet: Fleet) -> int | None:
    return None if row.carrying_nodes is None else row.carrying_nodes * fleet.gpus_per_node


def dra_goal(window: Window, rows: list[Row], fleet: Fleet, zero: RowZero) -> str:
    """Issue 53's measure: the DRA row against row k (elastic layouts) and the pooled
    reference of the DRA row's own shapes. The goal: it carries on no more GPUs than that
    reference, and its p95 wait on the default fleet is below row k's there."""
    by_key = {r.policy.key: r for r in rows}
    dra_row = next((r for r in rows if r.policy.dra), None)
    if dra_row is None:
        return ""
    k = by_key.get("k")
    model = facts.get_model(fleet.model)
    up_to = MAX_NODES_FACTOR * max(1, -(-zero.gpus // fleet.gpus_per_node))
    size = pooled.sizes(window, dra_row.policy, model, "shape")
    pool_here = pooled.serve(window, size, fleet.gpus)
    pool = pooled.smallest(window, size, fleet.gpus_per_node, WAIT_LIMIT_S, up_to)
    whole = facts.WHOLE_GPU_RESOURCE

    def cells(row: Row | None) -> list[str]:
        if row is None:
            return ["not run"] * 6
        r, there, gpus = row.default, row.carrying, _carrying_gpus(row, fleet)
        return [
            "none found" if gpus is None else f"{gpus}",
            f"{r.alloc_slices:.1%} / " + ("—" if there is None else f"{there.alloc_slices:.1%}"),
            _minutes(r.wait(0.95)),
            "—" if there is None else _minutes(there.wait(0.95)),
            f"{_minutes(r.wait_asking(0.95, lambda a: a == whole))} / "
            f"{_minutes(r.wait_asking(0.95, lambda a: a != whole))}",
            f"{r.reshaped_gpus} / " + ("—" if there is None else f"{there.reshaped_gpus}"),
        ]

    pool_cells = [
        "none found" if pool is None else f"{pool.gpus}",
        "—",
        _minutes(pool_here.wait_p95_s),
        "—" if pool is None else _minutes(pool.wait_p95_s),
        "—",
        "—",
    ]
    names = [
        "carrying fleet, GPUs",
        f"by slices, {fleet.gpus} GPUs / there",
        f"p95 wait, {fleet.gpus} GPUs",
        "p95 wait at its carrying fleet",
        f"p95 wait of whole-GPU / fractional asks, {fleet.gpus} GPUs",
        f"GPUs re-shaped (drained), {fleet.gpus} GPUs / there",
    ]
    key = dra_row.policy.key
    columns = zip(names, cells(k), cells(dra_row), pool_cells, strict=True)
    lines = [
        f"\nIssue 53: DRA (row {key}) against elastic layouts (row k) and the pooled reference "
        f"of row {key}'s shapes (`replay/simulate/dra.py`); counters: "
        f"{dra.counter_source(model)}:\n",
        f"| | row k | row {key} (DRA) | pooled, row {key}'s shapes |\n|---|---|---|---|",
        *(f"| {n} | {a} | {b} | {c} |" for n, a, b, c in columns),
    ]
    gpus = _carrying_gpus(dra_row, fleet)
    fleet_ok = gpus is not None and pool is not None and gpus <= pool.gpus
    wait_ok = k is not None and dra_row.default.wait(0.95) < k.default.wait(0.95)
    lines.append(
        f"\nGoal: row {key} carries on no more GPUs than the pool of its shapes: "
        f"{'yes' if fleet_ok else 'no'}; its p95 wait on {fleet.gpus} GPUs is below row k's: "
        + ("row k not run" if k is None else "yes" if wait_ok else "no")
        + f". Goal met: {'yes' if fleet_ok and wait_ok else 'no'}.\n"
    )
    return "\n".join(lines)
