"""Calibration of the simulator's harness against part 1's observations (pure: it reads the
file part 1 wrote, `replay.report.observations`, and needs no cluster).

1. Which jobs the policy itself starts at once: the zero-harness simulation of the same window
   and setup, per policy (`immediate`).
2. The fit (`fit_harness`), in trace seconds (wall × compression):
   - admission latency: the median of submit → first Running over the jobs of (1) that ran;
   - release latency: not observed by part 1's pod watch (it sees Succeeded, not the quota's
     release). Estimated from jobs that waited on the cluster (submit → Running over
     `QUEUED_FACTOR` × the admission latency) in a queue that cannot borrow (policies without
     borrowing): the gap from the last end of a job of the same team while it waited to its
     start is release + Kueue's requeue + admitted → Running; the median gap less the
     admission latency (≥ 0), which takes admitted → Running to be as long as submit →
     Running (an upper bound: no submit path). Without such jobs it is 0, and said so;
   - clock resolution: 1 wall s (creationTimestamp's), × compression.
   Requeue delay and cycle time stay 0: the release gap absorbs the requeue.
3. `match`: the fitted simulation against the cluster's range over the repeats, widened by
   `ALLOC_TOLERANCE` (points of allocation by milli) and `STARTED_TOLERANCE` (a fraction of
   the cluster's mean of jobs started).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from catalog import facts
from replay.simulate.engine import Harness, Result, measure
from replay.simulate.fleet import DRAIN_LIMIT_S, Setup, build
from replay.workload import Window

ALLOC_TOLERANCE = 0.03  # ±3 points of allocation: the cluster's own run-to-run range
STARTED_TOLERANCE = 0.05  # ±5 % of jobs started
QUEUED_FACTOR = 2.0  # submit → Running over this × the admission latency: it waited in queue
FEW = 10  # samples below which an estimate is called weak
MIN_RUN_S = 0.05  # part 1's shortest run (`overtime.MIN_RUN_S`), wall seconds


@dataclass(frozen=True)
class Fit:
    harness: Harness
    compression: float
    admission_samples: int
    release_samples: int  # 0: release latency not observed, left at 0
    release_gap_s: float | None  # median gap (trace s) before the admission is taken off
    lateness_wall_s: tuple[float, float] | None  # submit lateness, median and max (wall s)
    stretch_wall_s: float | None  # median of a run's observed length − the length asked
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Match:
    alloc_ok: bool
    started_ok: bool
    alloc_gap_pts: float  # outside the widened range (0 inside), + above, − below
    started_gap: float

    @property
    def ok(self) -> bool:
        return self.alloc_ok and self.started_ok


def _gap(value: float, lo: float, hi: float) -> float:
    return value - hi if value > hi else value - lo if value < lo else 0.0


def match(
    cluster_alloc: list[float], cluster_started: list[float], sim_alloc: float, sim_started: float
) -> Match:
    """The simulator within the cluster's range widened by the tolerances: allocation (0..1)
    by ±ALLOC_TOLERANCE, jobs started by ±STARTED_TOLERANCE × the cluster's mean."""
    widen = STARTED_TOLERANCE * statistics.fmean(cluster_started)
    a = _gap(sim_alloc, min(cluster_alloc) - ALLOC_TOLERANCE, max(cluster_alloc) + ALLOC_TOLERANCE)
    s = _gap(sim_started, min(cluster_started) - widen, max(cluster_started) + widen)
    return Match(a == 0.0, s == 0.0, a * 100, s)


def compression_of(runs: list[dict]) -> float:
    values = {round(r["compression"], 6) for r in runs}
    if len(values) != 1:
        raise ValueError(f"the runs were made at different compressions: {sorted(values)}")
    return runs[0]["compression"]


def _release_gaps(jobs: list[dict], queued_wall_s: float) -> list[float]:
    """For each job that waited (submit → Running over `queued_wall_s`): the gap from the last
    end of another job of its team while it waited to its start (wall s)."""
    gaps = []
    for job in jobs:
        if not job["runs"] or job["runs"][0][0] - job["submitted"] <= queued_wall_s:
            continue
        start = job["runs"][0][0]
        ends = [
            e
            for other in jobs
            if other is not job and other["team"] == job["team"]
            for _, e in other["runs"]
            if e is not None and job["submitted"] <= e <= start
        ]
        if ends:
            gaps.append(start - max(ends))
    return gaps


def fit_harness(
    runs: list[dict],
    immediate: dict[str, set[str]],
    no_borrowing: set[str],
    arrivals: dict[str, float] | None = None,
    asked_run: dict[str, float] | None = None,
) -> Fit:
    """`runs`: the observations' runs; `immediate`: per policy, the names of the jobs the
    zero-harness simulation starts on arrival; `no_borrowing`: policies whose queues cannot
    borrow (a waiting job there waits for its own queue); `arrivals` and `asked_run` (trace
    seconds per pod name) for the submit lateness and the run stretch, reported only."""
    c = compression_of(runs)
    admit, gaps, late, stretch = [], [], [], []
    notes: list[str] = []
    missing = 0
    for run in runs:
        now = immediate.get(run["policy"], set())
        jobs = run["jobs"]
        for job in jobs:
            if arrivals is not None and job["name"] in arrivals:
                late.append(job["submitted"] - arrivals[job["name"]] / c)
            for start, end in job["runs"]:
                if asked_run is not None and end is not None and job["name"] in asked_run:
                    asked = max(MIN_RUN_S, asked_run[job["name"]] / c)
                    if job["finished"] == end:
                        stretch.append(end - start - asked)
            if job["name"] in now:
                if job["runs"]:
                    admit.append(job["runs"][0][0] - job["submitted"])
                else:
                    missing += 1
    if not admit:
        raise ValueError("no job that the policy starts at once ran on the cluster: nothing to fit")
    if missing:
        notes.append(
            f"{missing} jobs the zero-harness simulation starts at once were not seen Running "
            "within the cluster's window"
        )
    admission = statistics.median(admit) * c
    for run in runs:
        if run["policy"] in no_borrowing:
            gaps += _release_gaps(run["jobs"], QUEUED_FACTOR * admission / c)
    gap = statistics.median(gaps) * c if gaps else None
    release = max(0.0, gap - admission) if gap is not None else 0.0
    if gap is None:
        notes.append("release latency not observed (no job waited for its own queue): left at 0")
    harness = Harness(
        admission_latency_s=admission, release_latency_s=release, clock_resolution_s=c
    )
    return Fit(
        harness=harness,
        compression=c,
        admission_samples=len(admit),
        release_samples=len(gaps),
        release_gap_s=gap,
        lateness_wall_s=(statistics.median(late), max(late)) if late else None,
        stretch_wall_s=statistics.median(stretch) if stretch else None,
        notes=notes,
    )


def run_jobs(
    window: Window, setup: Setup, harness: Harness, seed: int, *, fair_sharing: bool = True
) -> tuple[Result, int, set[str]]:
    """The simulation, with what part 1 measures besides: jobs started within the window, and
    the names of those started on arrival. Fair sharing on by default: the cluster's Kueue
    Configuration has it for every row (`kueue_config.kueue_configuration`)."""
    engine = build(setup, window, harness, seed, fair_sharing=fair_sharing)
    engine.run(window.length + DRAIN_LIMIT_S)
    model = facts.get_model(setup.fleet.model)
    result = measure(engine, window.length, setup.fleet.gpus, model.compute_slices)
    started = [j for j in engine.jobs if j.started is not None and j.started < window.length]
    at_once = {j.pod.name for j in started if j.started == j.pod.arrival}
    return result, len(started), at_once


@dataclass(frozen=True)
class PolicyFigures:
    """One policy's figures: allocation by milli (0..1), jobs started within the window,
    refused, preemptions; the cluster's per repeat, the simulator's one run each."""

    key: str
    title: str
    cluster_alloc: list[float]
    cluster_started: list[float]
    cluster_refused: list[float]
    cluster_preempted: list[float]
    zero: tuple[float, int, int, int]  # alloc, started, refused, preemptions
    fitted: tuple[float, int, int, int]


def reasons(p: PolicyFigures, m: Match, fit: Fit) -> list[str]:
    """The likely reasons for a mismatch, from what the observations show."""
    why = []
    if not m.ok:
        if p.fitted[2] != round(statistics.fmean(p.cluster_refused)):
            why.append(
                f"refused differ (cluster {statistics.fmean(p.cluster_refused):.0f}, simulator "
                f"{p.fitted[2]}): the setup (grants, layouts) is not the cluster's"
            )
        if round(statistics.fmean(p.cluster_preempted)) != p.fitted[3]:
            why.append(
                f"preemptions differ (cluster {statistics.fmean(p.cluster_preempted):.0f}, "
                f"simulator {p.fitted[3]})"
            )
        if fit.lateness_wall_s is not None and fit.lateness_wall_s[1] * fit.compression > 60:
            med, top = fit.lateness_wall_s
            why.append(
                f"submits ran behind their arrivals (median {med:.2f} s, up to {top:.2f} s wall): "
                "not modelled"
            )
        if fit.stretch_wall_s is not None and abs(fit.stretch_wall_s) * fit.compression > 60:
            why.append(
                f"pods ran {fit.stretch_wall_s:+.2f} wall s (median) beyond their asked run: "
                "not modelled (it counts as allocation on the cluster)"
            )
        if not why:
            why.append(
                "none of the observed harness effects explains it: Kueue's cycle under load, "
                "API rate limits and the Job controller are not modelled"
            )
    return why


def _range(values: list[float], fmt: str) -> str:
    mean = format(statistics.fmean(values), fmt)
    if len(values) == 1:
        return mean
    return f"{mean} ({format(min(values), fmt)}–{format(max(values), fmt)})"


def describe(fit: Fit) -> str:
    h = fit.harness
    lines = [
        f"compression {fit.compression:,.0f}×; fitted harness (trace s; wall s in brackets):",
        f"- admission latency {h.admission_latency_s:,.1f} "
        f"({h.admission_latency_s / fit.compression:.2f}): median submit → Running of "
        f"{fit.admission_samples} jobs the policy starts at once",
    ]
    if fit.release_gap_s is not None:
        lines.append(
            f"- release latency {h.release_latency_s:,.1f} "
            f"({h.release_latency_s / fit.compression:.2f}): median gap end → next start in "
            f"the same queue {fit.release_gap_s:,.1f} over {fit.release_samples} waiting jobs, "
            "less the admission latency (includes Kueue's requeue)"
            + (" — few samples: a weak estimate" if fit.release_samples < FEW else "")
        )
    else:
        lines.append("- release latency 0: not observed")
    lines.append(f"- clock resolution {h.clock_resolution_s:,.0f} (1 wall s); requeue, cycle 0")
    if fit.lateness_wall_s is not None:
        lines.append(
            f"- observed, not modelled: submit lateness median {fit.lateness_wall_s[0]:.2f} s, "
            f"max {fit.lateness_wall_s[1]:.2f} s wall"
        )
    if fit.stretch_wall_s is not None:
        lines.append(
            f"- observed, not modelled: a finished run lasted {fit.stretch_wall_s:+.3f} wall s "
            "(median) beyond its asked length"
        )
    lines += [f"- {n}" for n in fit.notes]
    return "\n".join(lines) + "\n"


def table(figures: list[PolicyFigures], fit: Fit) -> str:
    head = (
        "| policy | cluster runs | cluster alloc. by milli | cluster started | sim, zero harness "
        "(alloc / started) | sim, fitted (alloc / started) | match | zero harness would match |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    rows, notes = [], []
    for p in figures:
        m = match(p.cluster_alloc, p.cluster_started, p.fitted[0], p.fitted[1])
        if m.ok:
            verdict = "yes"
        else:
            gaps = []
            if not m.alloc_ok:
                gaps.append(f"alloc {m.alloc_gap_pts:+.1f} pts")
            if not m.started_ok:
                gaps.append(f"started {m.started_gap:+.1f}")
            verdict = "no: " + ", ".join(gaps)
            notes.append(f"{p.key}: " + "; ".join(reasons(p, m, fit)) + ".")
        rows.append(
            f"| {p.key}. {p.title} | {len(p.cluster_alloc)} | {_range(p.cluster_alloc, '.1%')} "
            f"| {_range(p.cluster_started, '.1f')} | {p.zero[0]:.1%} / {p.zero[1]} "
            f"| {p.fitted[0]:.1%} / {p.fitted[1]} | {verdict} "
            f"| {'yes' if match(p.cluster_alloc, p.cluster_started, *p.zero[:2]).ok else 'no'} |"
        )
    tail = (
        f"\nMatch: the fitted simulator within the cluster's range widened by "
        f"±{ALLOC_TOLERANCE * 100:.0f} points of allocation and ±{STARTED_TOLERANCE:.0%} of its "
        "mean of jobs started (within the window).\n"
    )
    return head + "\n".join(rows) + "\n" + tail + ("\n" + "\n".join(notes) + "\n" if notes else "")
