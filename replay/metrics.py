"""What a policy's replay measured, from what the cluster did (pure: no Django, no cluster).

Times are wall seconds from the replay's start; `compression` turns them back into trace time
(trace seconds per wall second). Allocation counts what running pods hold:
- by slices: compute slices held (a whole GPU 7, a MIG instance its g, a time-sliced replica
  7/4) over 7 × the fleet's GPUs;
- by requested milli: the trace's own ask of the running pods over 1000 × the fleet's GPUs
  (what the FGD paper calls allocation).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class JobRecord:
    name: str
    team: int
    slices: float  # compute slices held while it runs (all its units)
    milli: int  # the trace's ask
    submitted: float
    runs: list[tuple[float, float | None]] = field(default_factory=list)  # [start, end)
    finished: float | None = None  # when it succeeded
    preemptions: int = 0


@dataclass
class Measured:
    alloc_slices: float  # time-averaged, 0..1
    alloc_milli: float
    wait_p50: float | None  # trace seconds, jobs that started
    wait_p95: float | None
    not_started: int
    started: int
    finished_per_hour: float  # per trace hour
    team_share: dict[int, float]  # held ÷ granted, time-averaged, in GPU-equivalents
    preemptions: int
    series: list[tuple[float, float]]  # (trace hours, allocation by slices)


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))  # ceil, in integers
    return ordered[int(rank) - 1]


def _clipped(runs: list[tuple[float, float | None]], horizon: float) -> list[tuple[float, float]]:
    out = []
    for start, end in runs:
        stop = horizon if end is None else min(end, horizon)
        if stop > start:
            out.append((start, stop))
    return out


def measure(
    jobs: list[JobRecord],
    *,
    horizon: float,
    compression: float,
    fleet_gpus: int,
    slices_per_gpu: int,
    granted_gpus: dict[int, float],
    points: int = 120,
) -> Measured:
    if horizon <= 0 or fleet_gpus <= 0:
        raise ValueError("a replay needs a positive horizon and fleet")
    slice_time = milli_time = 0.0
    held_by_team: dict[int, float] = defaultdict(float)
    waits = []
    for job in jobs:
        for start, stop in _clipped(job.runs, horizon):
            slice_time += job.slices * (stop - start)
            milli_time += job.milli * (stop - start)
            held_by_team[job.team] += job.slices / slices_per_gpu * (stop - start)
        if job.runs and job.runs[0][0] < horizon:
            waits.append((job.runs[0][0] - job.submitted) * compression)
    step = horizon / points
    series = []
    for i in range(points):
        t = (i + 0.5) * step
        held = sum(j.slices for j in jobs for s, e in j.runs if s <= t and (e is None or t < e))
        series.append((t * compression / 3600, held / (slices_per_gpu * fleet_gpus)))
    finished = sum(1 for j in jobs if j.finished is not None and j.finished <= horizon)
    started = len(waits)
    return Measured(
        alloc_slices=slice_time / (horizon * slices_per_gpu * fleet_gpus),
        alloc_milli=milli_time / (horizon * 1000 * fleet_gpus),
        wait_p50=percentile(waits, 50),
        wait_p95=percentile(waits, 95),
        not_started=len(jobs) - started,
        started=started,
        finished_per_hour=finished / (horizon * compression / 3600),
        team_share={
            team: held_by_team.get(team, 0.0) / horizon / gpus
            for team, gpus in sorted(granted_gpus.items())
            if gpus > 0
        },
        preemptions=sum(j.preemptions for j in jobs),
        series=series,
    )
