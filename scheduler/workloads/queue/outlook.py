"""What a waiting workload waits behind, and when it may start (pure, issue 35, 4).

`waiting.explain` says why it waits and what would help; this adds the two things a person asks
next: which of the team's work is ahead of it in the queue, and an estimate: the earliest time a
workload holding the team's quota of the model reaches its maximum run time and gives it back.
An estimate, said as one: work may end sooner, and higher-priority work may come first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from catalog.run_limits import duration_words

MAX_AHEAD = 5  # workloads named ahead of it; the rest are counted


@dataclass(frozen=True)
class Ahead:
    name: str
    position: int


@dataclass(frozen=True)
class Ending:
    name: str  # a workload that holds the team's quota of the model
    ends_at: datetime  # when its maximum run time stops it


@dataclass(frozen=True)
class Outlook:
    behind: str  # "" when nothing of the team's is ahead
    estimate: str


def outlook(*, ahead: list[Ahead], endings: list[Ending], holders: int, now: datetime) -> Outlook:
    """`ahead`: the team's waiting work before it; `endings`: the team's running work of the
    model under a maximum run time; `holders`: how many running workloads hold that quota."""
    ahead = sorted(ahead, key=lambda a: a.position)
    named = [f"{a.name} (position {a.position})" for a in ahead[:MAX_AHEAD]]
    if len(ahead) > MAX_AHEAD:
        named.append(f"{len(ahead) - MAX_AHEAD} more")
    behind = ""
    if named:
        behind = f"{', '.join(named)}: the team's work ahead of it in its queue."
    return Outlook(behind=behind, estimate=_estimate(endings, holders, now))


def _estimate(endings: list[Ending], holders: int, now: datetime) -> str:
    if not endings:
        if holders:
            return (
                "No estimate: the work holding the team's quota has no maximum run time, so it "
                "starts when that work ends or other teams leave capacity idle."
            )
        return "No estimate: nothing of the team's runs now; it starts when capacity frees up."
    first = min(endings, key=lambda e: e.ends_at)
    left = duration_words(int((first.ends_at - now).total_seconds()))
    return (
        f"In about {left} at the latest for the first units: {first.name} reaches its maximum "
        f"run time at {first.ends_at:%H:%M %Z} and gives its quota back (sooner if work ends "
        "earlier; higher-priority work may go first)."
    )
