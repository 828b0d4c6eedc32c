"""The simulator's table: row 0 and a…e, on the default fleet and on the carrying fleet, each
row beside the seed article's claim for its technique."""

from __future__ import annotations

import math

from replay.simulate.engine import Result
from replay.simulate.fleet import Fleet
from replay.simulate.rows import Row, RowZero, shortfalls
from replay.workload import COMBINED_CLAIM_PTS


def _pct(value: float) -> str:
    return f"{value:.1%}"


def _wait(result: Result, q: float) -> str:
    w = result.wait(q)
    return "never" if not math.isfinite(w) else f"{w / 60:,.0f}"


def _shares(row: Row) -> str:
    """Each team's GPU-equivalents held ÷ granted, time-averaged (above 100 %: borrowing)."""
    out = []
    for team, granted in sorted(row.setup.granted_gpus.items()):
        held = row.default.team_held.get(team, 0.0)
        out.append(f"{held / granted:.0%}" if granted else "—")
    return " / ".join(out)


def _claim(row: Row) -> str:
    claim = row.policy.claim_pts
    return "—" if claim is None else f"+{claim:g}"


def table(zero: RowZero, rows: list[Row], fleet: Fleet) -> str:
    """Columns: allocation by requested milli and by slices on the default fleet, queue wait
    p50/p95 (trace minutes), jobs refused (the portal's rule: more than grant + borrowing
    limit) and never started, GPU-hours of work redone after preemption, each team's share of
    its grant; then the smallest fleet that carries the trace, its GPUs against row 0's,
    allocation there, and the gain in points of allocation by milli over the row before at
    the carrying fleet (row a over row 0), beside the seed's claim for that technique."""
    head = (
        f"| row | on {fleet.nodes}×{fleet.gpus_per_node} {fleet.model}: by milli | by slices "
        "| wait p50 / p95 min | refused / never started | GPU-h redone | teams' share of grant "
        "| carrying fleet, nodes | GPUs vs row 0 | alloc. there, milli / slices | gain, pts "
        "| seed claims |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| 0. dedicated whole GPUs per team, sized to its peak | — | — | 0 / 0 | 0 / 0 | 0 | — "
        f"| {zero.gpus} GPUs ({' + '.join(str(v) for _, v in sorted(zero.per_team.items()))}) "
        f"| 100% | {_pct(zero.alloc_milli)} / {_pct(zero.alloc_slices)} | — "
        f"| seed: 30–40 % |"
    ]
    previous = zero.alloc_milli
    for row in rows:
        r = row.default
        if row.carrying is not None and row.carrying_nodes is not None:
            gpus = row.carrying_nodes * fleet.gpus_per_node
            carry = f"{row.carrying_nodes} ({gpus} GPUs)" + (
                "" if row.exhaustive else ", smaller sizes not all tried"
            )
            versus = f"{gpus / zero.gpus:.0%}" if zero.gpus else "—"
            there = f"{_pct(row.carrying.alloc_milli)} / {_pct(row.carrying.alloc_slices)}"
            gain = f"{(row.carrying.alloc_milli - previous) * 100:+.1f}"
            previous = row.carrying.alloc_milli
        else:
            tried = max((n for n, _ in row.probes), default=0)
            carry = f"none ≤ {tried}" if row.probes else "not searched"
            versus = there = gain = "—"
        lines.append(
            f"| {row.policy.key}. {row.policy.title} | {_pct(r.alloc_milli)} "
            f"| {_pct(r.alloc_slices)} | {_wait(r, 0.5)} / {_wait(r, 0.95)} "
            f"| {r.refused} / {r.never_started} | {r.lost_gpu_hours:,.1f} | {_shares(row)} "
            f"| {carry} | {versus} | {there} | {gain} | {_claim(row)} |"
        )
    # "all together" is part 1's last policy, not a what-if row
    last = next((r for r in reversed(rows) if not r.policy.slices), None)
    notes = []
    if last is not None and last.carrying is not None and rows[0].carrying is not None:
        total = (last.carrying.alloc_milli - zero.alloc_milli) * 100
        notes.append(
            f"All together over row 0, at each one's carrying fleet: {total:+.1f} points "
            f"(seed: +{COMBINED_CLAIM_PTS})."
        )
    for row in rows:
        why = shortfalls(row.default)
        if why:
            notes.append(
                f"{row.policy.key} on {fleet.nodes} nodes does not carry: {'; '.join(why)}."
            )
    return head + "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "") + "\n"
