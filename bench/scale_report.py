"""The scale benches' arithmetic and tables (pure): percentiles, slopes between two sizes, the
cost per 1,000 workloads, and the rows they print. Kept apart from the runs so that a test can
check the figures without a database or a cluster."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank: a p99 of 50 samples is the largest, never a
    value between two samples that no request took."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def growth(small: float, large: float, size_small: int, size_large: int) -> tuple[float, float]:
    """(cost ratio, ratio over the size ratio) between two sizes: 10 and 1.0 for a linear stage
    measured at 1,000 and 10,000; the second above ~1.5 is super-linear (or noise: rerun)."""
    if small <= 0 or size_small <= 0:
        return math.nan, math.nan
    ratio = large / small
    return ratio, ratio / (size_large / size_small)


def per_thousand(total: float, count: int) -> float:
    """A cost per 1,000 of something (CPU seconds, MiB) from its total over `count`."""
    return math.nan if count <= 0 else total * 1000 / count


def rate(count: int, seconds: float) -> float:
    return math.nan if seconds <= 0 else count / seconds


@dataclass(frozen=True)
class Measure:
    """One stage at one size: wall seconds (median of the repeats), queries and what it saw."""

    stage: str
    size: int
    seconds: float
    queries: int = 0
    note: str = ""


def slope_rows(measures: Sequence[Measure]) -> list[tuple[str, int, int, float, float, float]]:
    """Per stage, its smallest size against its largest: (stage, small, large, ratio of wall,
    ratio / size ratio, ratio of queries). A stage measured at one size has no row."""
    by_stage: dict[str, list[Measure]] = {}
    for m in measures:
        by_stage.setdefault(m.stage, []).append(m)
    rows = []
    for stage, ms in by_stage.items():
        if len(ms) < 2:
            continue
        lo, hi = min(ms, key=lambda m: m.size), max(ms, key=lambda m: m.size)
        ratio, normalised = growth(lo.seconds, hi.seconds, lo.size, hi.size)
        queries = hi.queries / lo.queries if lo.queries else math.nan
        rows.append((stage, lo.size, hi.size, ratio, normalised, queries))
    return rows


def table(measures: Sequence[Measure]) -> str:
    """The figures, then the slopes, as the benches print them."""
    out = [f"{'stage':<44} {'size':>8} {'wall s':>9} {'queries':>8}  note"]
    for m in measures:
        out.append(f"{m.stage:<44} {m.size:>8} {m.seconds:>9.3f} {m.queries:>8}  {m.note}")
    slopes = slope_rows(measures)
    if slopes:
        out += ["", f"{'stage':<44} {'sizes':>13} {'× wall':>8} {'/ size ×':>9} {'× queries':>9}"]
        for stage, lo, hi, ratio, normalised, queries in slopes:
            flag = "  super-linear?" if normalised > 1.5 else ""
            out.append(
                f"{stage:<44} {f'{lo}→{hi}':>13} {ratio:>8.2f} {normalised:>9.2f}"
                f" {queries:>9.2f}{flag}"
            )
    return "\n".join(out)
