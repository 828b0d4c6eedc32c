"""Culling a workspace: the decision for one running workspace (pure, no Django, no cluster).

A workspace is idle when BOTH its server says no kernel or terminal was active (Jupyter's
`last_activity`) AND its GPU use is under the threshold (the idle-reclaim signal, DCGM through
Prometheus): a long training cell shows no activity but uses the GPU; a person typing uses no
GPU but is active. Quiet time counts from the later of the last activity and the run's start
(or restart). At `idle_after - notice` quiet the owner is warned; at `idle_after`, and once the
notice has passed since the warning, it is stopped (its volume kept). Missing data (the server
did not answer, no GPU series) never stops anything: the clock neither runs nor resets.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum

from catalog.run_limits import duration_words


class Cull(StrEnum):
    NONE = "none"  # nothing to do or record
    CLEAR = "clear"  # active again: withdraw the warning
    WARN = "warn"
    STOP = "stop"


@dataclass(frozen=True)
class CullPolicy:
    idle_after_s: int
    notice_s: int  # the warning comes this long before the stop
    threshold_pct: int  # GPU use under this is idle


@dataclass(frozen=True)
class CullFacts:
    started_at: datetime | None  # the run's start or its last restart
    last_activity: datetime | None  # None: the server did not say
    gpu_use: Decimal | None  # 0-1 over the window; None: no data
    warned_at: datetime | None = None


@dataclass(frozen=True)
class CullStep:
    action: Cull
    quiet_since: datetime | None = None
    why: str = ""


def quiet_since(facts: CullFacts) -> datetime | None:
    times = [t for t in (facts.started_at, facts.last_activity) if t is not None]
    return max(times) if times else None


def decide(policy: CullPolicy, facts: CullFacts, now: datetime) -> CullStep:
    warned = facts.warned_at is not None
    if facts.started_at is None:
        return CullStep(Cull.NONE)
    if facts.last_activity is None or facts.gpu_use is None:
        return CullStep(Cull.NONE)  # never on missing data
    since = quiet_since(facts)
    assert since is not None
    busy = facts.gpu_use * 100 >= policy.threshold_pct
    if busy or (warned and facts.warned_at < since):  # type: ignore[operator]
        # the GPU works, or someone was active after the warning
        return CullStep(Cull.CLEAR if warned else Cull.NONE)
    quiet_s = (now - since).total_seconds()
    warn_at_s = max(policy.idle_after_s - policy.notice_s, 0)
    if (
        warned
        and quiet_s >= policy.idle_after_s
        and (now - facts.warned_at).total_seconds() >= policy.notice_s  # type: ignore[operator]
    ):
        return CullStep(Cull.STOP, since, stopped_words(quiet_s, policy.threshold_pct))
    if not warned and quiet_s >= warn_at_s:
        left = max(policy.idle_after_s - quiet_s, policy.notice_s)
        at = now + timedelta(seconds=left)
        return CullStep(
            Cull.WARN,
            since,
            f"no kernel or terminal activity for {duration_words(int(quiet_s))} and GPU use "
            f"under {policy.threshold_pct} %: it stops at {at:%H:%M %Z} (its home volume is "
            "kept) unless it is used",
        )
    return CullStep(Cull.NONE, since)


def stopped_words(quiet_s: float, threshold_pct: int) -> str:
    return (
        f"stopped after {duration_words(int(quiet_s))} with no kernel or terminal activity and "
        f"GPU use under {threshold_pct} %; its home volume is kept"
    )


def stops_at(policy: CullPolicy, facts: CullFacts) -> datetime | None:
    """When it stops if nothing happens (the page's idle timer), or None when unknown."""
    since = quiet_since(facts)
    if since is None or facts.last_activity is None:
        return None
    return since + timedelta(seconds=policy.idle_after_s)
