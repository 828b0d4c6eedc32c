"""Idle GPUs given back: the decision for one running workload (pure, no Django, no cluster).

Level-triggered: each look (metering/idle_runs.py, every IDLE_CHECK_EVERY_S) brings the
workload's GPU use over the last window, the highest of its GPU pods' means (None: no data for
one of them), and what earlier looks recorded on its row (idle since, last confirmed, warned
at). The decision says what to record and whether to warn or suspend:

- no policy, an exemption, or within the protection window after a start or resume: forget any
  idle clock;
- no data (a pod without series, Prometheus unreachable never gets here): nothing at all, the
  clock neither runs nor resets, and nothing is ever suspended on missing data;
- busy (at or above the threshold): forget the clock and the warning;
- idle: the clock starts (or starts again after a gap longer than `max_gap_s` between looks,
  since nobody saw what happened in between); once idle `warn_after_s` the owners are warned,
  and once warned for the difference between the two times (the notice the policy promises,
  even when a warning came late) the workload is suspended.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum

from catalog.idle_policy import IdlePolicy
from catalog.run_limits import duration_words


class Action(StrEnum):
    NONE = "none"  # nothing to record
    CLEAR = "clear"  # forget the idle clock and any warning
    TRACK = "track"  # record the idle clock (started or confirmed)
    WARN = "warn"  # record it and warn the owners
    SUSPEND = "suspend"  # suspend the workload


@dataclass(frozen=True)
class IdleFacts:
    started_at: datetime | None  # the later of its start and its last resume
    use: Decimal | None  # 0-1, the busiest GPU pod's mean over the window; None: no data
    idle_since: datetime | None = None
    idle_seen_at: datetime | None = None
    warned_at: datetime | None = None
    exempt: str = ""  # why it is exempt ("priority gpu-critical"), "" when it is not


@dataclass(frozen=True)
class Step:
    action: Action
    idle_since: datetime | None = None
    why: str = ""  # what the page, the audit and the mail say


def decide(policy: IdlePolicy | None, facts: IdleFacts, now: datetime, *, max_gap_s: float) -> Step:
    tracking = facts.idle_since is not None or facts.warned_at is not None
    forget = Step(Action.CLEAR if tracking else Action.NONE)
    if policy is None or facts.exempt or facts.started_at is None:
        return forget
    if (now - facts.started_at).total_seconds() < policy.protect_s:
        return forget
    if facts.use is None:
        return Step(Action.NONE)
    if facts.use * 100 >= policy.threshold_pct:
        return forget
    since = facts.idle_since
    if (
        since is None
        or facts.idle_seen_at is None
        or (now - facts.idle_seen_at).total_seconds() > max_gap_s
    ):
        # a new clock: a warning of an earlier stretch promised nothing about this one
        return Step(Action.TRACK, now, f"below {policy.threshold_pct} % GPU use since now")
    idle_s = (now - since).total_seconds()
    notice_s = policy.suspend_after_s - policy.warn_after_s
    if (
        facts.warned_at is not None
        and facts.warned_at >= since
        and idle_s >= policy.suspend_after_s
        and (now - facts.warned_at).total_seconds() >= notice_s
    ):
        return Step(Action.SUSPEND, since, suspended_words(idle_s, policy.threshold_pct))
    if (facts.warned_at is None or facts.warned_at < since) and idle_s >= policy.warn_after_s:
        at = now + timedelta(seconds=notice_s)
        return Step(
            Action.WARN,
            since,
            f"{duration_words(int(idle_s))} below {policy.threshold_pct} % GPU use: it will be "
            f"suspended after {duration_words(notice_s)} more (at {at:%H:%M %Z}) unless it uses "
            "its GPUs",
        )
    return Step(Action.TRACK, since)


def suspended_words(idle_s: float, threshold_pct: int) -> str:
    """'suspended after 45 min below 5 % GPU use'."""
    return f"suspended after {duration_words(int(idle_s))} below {threshold_pct} % GPU use"
