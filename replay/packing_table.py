"""Part 2's table: the measured methods, then the published rows of the workload read."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from statistics import mean

from replay.mixed import MIXED_METHODS
from replay.packing import PackingResult
from replay.published import SOURCE, published_rows


def _spread(values: list[float], digits: int, scale: float = 1.0) -> str:
    low, high, avg = min(values) * scale, max(values) * scale, mean(values) * scale
    if round(low, digits) == round(high, digits):
        return f"{avg:.{digits}f}"
    return f"{avg:.{digits}f} ({low:.{digits}f}–{high:.{digits}f})"


def _what(method: str) -> str:
    if method in MIXED_METHODS:
        return "whole, MIG or shared"
    return "MIG"


def _model_map(mapping: dict[str, str]) -> str:
    """`P100, T4 → A100-80GB` per catalog model."""
    by_target: dict[str, list[str]] = defaultdict(list)
    for trace_model, catalog_model in mapping.items():
        by_target[catalog_model].append(trace_model)
    return "; ".join(f"{', '.join(models)} → {key}" for key, models in by_target.items())


def packing_table(results: Sequence[PackingResult], workload: str) -> str:
    """Markdown: measured methods (mean over seeds, min–max in brackets), then the published
    rows of `workload` at the results' ρ (or a line saying none are published), with notes
    saying what the fleet is and where the published rows come from."""
    if not results:
        raise ValueError("no packing results to tabulate")
    by_method: dict[str, list[PackingResult]] = defaultdict(list)
    for r in results:
        by_method[r.method].append(r)
    lines = [
        "| method | A_req % | A_slice % | unallocated GPUs | failed pods (of them CPU-only) "
        "| s/seed | idle GPUs | GPUs MIG / shared |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, rows in by_method.items():
        lines.append(
            f"| {method} ({_what(method)}, counterfactual fleet) "
            f"| {_spread([r.a_req for r in rows], 2, 100)} "
            f"| {_spread([r.a_slice for r in rows], 2, 100)} "
            f"| {_spread([r.unallocated_gpus for r in rows], 0)} "
            f"| {_spread([float(r.failed) for r in rows], 0)} "
            f"({_spread([float(r.failed_cpu_only) for r in rows], 0)}) "
            f"| {_spread([r.seconds for r in rows], 2)} "
            f"| {_spread([float(r.idle_gpus) for r in rows], 0)} "
            f"| {_spread([float(r.mig_gpus) for r in rows], 0)} / "
            f"{_spread([float(r.shared_gpus) for r in rows], 0)} |"
        )
    first = results[0]
    published = published_rows(workload, first.rho)
    if published is None:
        lines.append(
            f"| {workload} at ρ = {first.rho:g}: not published | – | – | – | – | – | – | – |"
        )
    else:
        for row in published:
            lines.append(
                f"| {row.policy} (published, {workload}, fractional GPUs) | {row.a_req:.2f} | – "
                f"| {row.unallocated_gpus:.0f} | – | – | – | – |"
            )
    seeds = sorted({r.seed for r in results})
    limits = (
        "each node's CPU and memory respected" if first.node_limits else "CPU and memory ignored"
    )
    lines += [
        "",
        f"Measured rows: `{workload}` on the trace's fleet ({first.nodes:,} nodes, "
        f"{first.gpus:,} GPUs), each node keeping its trace model, which `gpu_spec` is checked "
        "against; the models re-imagined as MIG-capable catalog models "
        f"({_model_map(first.model_map)}), "
        "a counterfactual fleet (the trace has no MIG GPUs); "
        "the workload built as the published runs build theirs (the whole pod list, CPU-only "
        "pods too, plus draws with replacement, shuffled) and cut where its GPU request "
        f"reaches ρ = {first.rho:g}, no departures, {limits}, "
        f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}, mean (min–max). MIG rows round "
        "each fractional ask up to a MIG profile; `mixed` and `online-best-fit` share a GPU by "
        "exact milli (replicas sized to the asks) and make a GPU MIG where its pods' profiles "
        "pack. `planner`, `greedy` and `mixed` see the whole batch at once (offline; the MIG "
        "planner places the CPU-only pods first, `mixed` keeps whichever of its orders places "
        "the most GPU milli, which may turn CPU-only pods away: they count in failed pods); "
        "`online-first-fit`, `online-best-fit` and the published rows place pods one at a time "
        "in arrival order (online). Unallocated GPUs = (1 − A_req) · #GPUs, as in the published "
        "rows; idle GPUs hold no pod at all.",
        f"Published rows: {SOURCE}; mean of 10 seeds on the same 6,212-GPU fleet with "
        "fractional sharing and no MIG rounding; ρ = 1.0 is the same runs when the arrived "
        "pods request 100 % of capacity.",
    ]
    return "\n".join(lines)
