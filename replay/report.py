"""The over-time replay's table and chart (pure, apart from writing the PNG)."""

from __future__ import annotations

from pathlib import Path

from replay.overtime import PolicyRun
from replay.workload import COMBINED_CLAIM_PTS


def _pts(value: float) -> str:
    return f"{value * 100:+.1f}"


def _secs(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def by_policy(runs: list[PolicyRun]) -> list[list[PolicyRun]]:
    """Runs grouped by policy (the repeats of one policy together), in the order first run."""
    groups: dict[str, list[PolicyRun]] = {}
    for run in runs:
        groups.setdefault(run.policy.key, []).append(run)
    return list(groups.values())


def _spread(values: list[float], fmt: str) -> str:
    """The mean, and the range when there are repeats: `68.4% (64.7–72.0)`."""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return format(mean, fmt)
    lo, hi = format(min(values), fmt).rstrip("%"), format(max(values), fmt).rstrip("%")
    return f"{format(mean, fmt)} ({lo}–{hi})"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def overtime_table(runs: list[PolicyRun]) -> str:
    """One row per policy, the mean of its repeats (and their range where there are several):
    allocation by slices and by requested milli (time-averaged), queue wait p50/p95 (trace
    seconds), jobs never started, submits refused (an ask larger than the team's grant plus
    what it may borrow: 409), jobs finished per trace hour, each team's share of its grant,
    preemptions, GPUs reconfigured, then the gain over the row before (in points of allocation
    by milli: by slices, a tenth of a GPU on a whole one counts as a whole one) beside the seed
    article's claim for that technique."""
    head = (
        "| policy | runs | alloc. by slices | alloc. by milli | wait p50 / p95 s | not started "
        "| refused | jobs/h | teams' share of grant | preempted | GPUs reconf. | gain, pts "
        "| seed claims |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    milli: dict[str, float] = {}
    previous: str | None = None
    for group in by_policy(runs):
        policy = group[0].policy
        ms = [r.measured for r in group]
        milli[policy.key] = _mean([m.alloc_milli for m in ms])
        p50 = [m.wait_p50 for m in ms if m.wait_p50 is not None]
        p95 = [m.wait_p95 for m in ms if m.wait_p95 is not None]
        teams = sorted({t for m in ms for t in m.team_share})
        shares = " / ".join(f"{_mean([m.team_share.get(t, 0.0) for m in ms]):.0%}" for t in teams)
        gain = "—" if previous is None else _pts(milli[policy.key] - milli[previous])
        claim = "—" if policy.claim_pts is None else f"+{policy.claim_pts:.0f}"
        rows.append(
            f"| {policy.key}. {policy.title} | {len(group)} "
            f"| {_spread([m.alloc_slices for m in ms], '.1%')} "
            f"| {_spread([m.alloc_milli for m in ms], '.1%')} "
            f"| {_secs(_mean(p50) if p50 else None)} / {_secs(_mean(p95) if p95 else None)} "
            f"| {_mean([m.not_started for m in ms]):,.0f} "
            f"| {_mean([r.refused for r in group]):,.0f} "
            f"| {_mean([m.finished_per_hour for m in ms]):,.1f} | {shares or '—'} "
            f"| {_mean([m.preemptions for m in ms]):,.0f} "
            f"| {_mean([r.reconfigured_gpus for r in group]):,.0f} | {gain} | {claim} |"
        )
        previous = policy.key
    tail = ""
    if "a" in milli and previous not in (None, "a"):
        assert previous is not None
        tail = (
            f"\nCombined ({previous} over a, by milli): {_pts(milli[previous] - milli['a'])} "
            f"points measured; the seed claims +{COMBINED_CLAIM_PTS}.\n"
        )
    return head + "\n".join(rows) + "\n" + tail


def allocation_chart(runs: list[PolicyRun], path: Path, title: str) -> Path:
    """Allocation by slices over trace time, one line per policy (the mean of its repeats)."""
    # Here, not at the top: matplotlib is slow to import, and only the chart needs it.
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only (before pyplot is imported)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    for group in by_policy(runs):
        # the mean of the repeats at each point (they share the points: same window, horizon)
        xs = [x for x, _ in group[0].measured.series]
        ys = [_mean([r.measured.series[i][1] for r in group]) * 100 for i in range(len(xs))]
        policy = group[0].policy
        ax.plot(xs, ys, label=f"{policy.key}. {policy.title}", linewidth=1.4)
    ax.set_xlabel("trace time (hours from the window's start)")
    ax.set_ylabel("GPU allocation by slices (%)")
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def observations(runs: list[PolicyRun]) -> dict:
    """Every job of every run as the cluster served it, in wall seconds from the run's start
    (submitted, each run [start, end), finished): what a calibration of the simulator's
    harness latencies reads (docs/replay.md)."""
    return {
        "runs": [
            {
                "run_id": run.run_id,
                "policy": run.policy.key,
                "compression": run.compression,
                "refused": run.refused,
                "alloc_slices": run.measured.alloc_slices,
                "alloc_milli": run.measured.alloc_milli,
                "started": run.measured.started,
                "not_started": run.measured.not_started,
                "jobs": [
                    {
                        "name": j.name,
                        "team": j.team,
                        "slices": j.slices,
                        "milli": j.milli,
                        "submitted": j.submitted,
                        "runs": j.runs,
                        "finished": j.finished,
                        "preemptions": j.preemptions,
                    }
                    for j in run.jobs
                ],
            }
            for run in runs
        ]
    }
