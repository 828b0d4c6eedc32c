"""The over-time replay's table and chart (pure, apart from writing the PNG)."""

from __future__ import annotations

from pathlib import Path

from replay.overtime import PolicyRun
from replay.workload import COMBINED_CLAIM_PTS


def _pts(value: float) -> str:
    return f"{value * 100:+.1f}"


def _secs(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def overtime_table(runs: list[PolicyRun]) -> str:
    """One row per policy: allocation by slices and by requested milli (time-averaged), queue
    wait p50/p95 (trace seconds), jobs never started, submits refused (an ask larger than the
    team's grant plus what it may borrow: 409), jobs finished per trace hour, each team's share
    of its grant, preemptions, GPUs reconfigured, then the gain over the row before (in
    points of allocation by milli: by slices, a tenth of a GPU on a whole one counts as a whole
    one) beside the seed article's claim for that technique."""
    head = (
        "| policy | alloc. by slices | alloc. by milli | wait p50 / p95 s | not started | refused "
        "| jobs/h | teams' share of grant | preempted | GPUs reconf. | gain, pts | seed claims |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    previous: PolicyRun | None = None
    for run in runs:
        m = run.measured
        shares = " / ".join(f"{s:.0%}" for s in m.team_share.values()) or "—"
        gain = "—" if previous is None else _pts(m.alloc_milli - previous.measured.alloc_milli)
        claim = "—" if run.policy.claim_pts is None else f"+{run.policy.claim_pts:.0f}"
        rows.append(
            f"| {run.policy.key}. {run.policy.title} | {m.alloc_slices:.1%} | {m.alloc_milli:.1%} "
            f"| {_secs(m.wait_p50)} / {_secs(m.wait_p95)} | {m.not_started} | {run.refused} "
            f"| {m.finished_per_hour:,.1f} | {shares} | {m.preemptions} | {run.reconfigured_gpus} "
            f"| {gain} | {claim} |"
        )
        previous = run
    first = {r.policy.key: r for r in runs}.get("a")
    last = runs[-1] if runs else None
    tail = ""
    if first is not None and last is not None and last is not first:
        total = last.measured.alloc_milli - first.measured.alloc_milli
        tail = (
            f"\nCombined ({last.policy.key} over a, by milli): {_pts(total)} points measured; "
            f"the seed claims +{COMBINED_CLAIM_PTS}.\n"
        )
    return head + "\n".join(rows) + "\n" + tail


def allocation_chart(runs: list[PolicyRun], path: Path, title: str) -> Path:
    """Allocation by slices over trace time, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    for run in runs:
        xs = [x for x, _ in run.measured.series]
        ys = [y * 100 for _, y in run.measured.series]
        ax.plot(xs, ys, label=f"{run.policy.key}. {run.policy.title}", linewidth=1.4)
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
