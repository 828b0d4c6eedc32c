"""Idle GPUs given back (issue 30, item 3): a pool's policy for workloads that hold its GPUs
without using them.

Per pool, like the maximum run time and the reclaim grace: the cost of an idle GPU is a property
of the hardware (an idle H200 is not an idle 1g.10gb slice), and the platform team already sets
each pool's other limits in one place. A workload below `threshold_pct` % GPU use for
`warn_after_s` is warned (its submitter and the team's owners), and suspended after
`suspend_after_s` (its quota freed for the next workload), never within `protect_s` of its
start. A workload on several pools gets the strictest: the one that suspends soonest.

Pure: the checks (a 400 that says what to change), the rule and the words; no Django.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.run_limits import duration_words
from core.errors import InvalidInput

# A week: idle longer than this is not "idle", it is forgotten; the bound stops a typo.
MAX_IDLE_S = 7 * 24 * 3600
FIELDS = ("idle_threshold_pct", "idle_warn_after_s", "idle_suspend_after_s", "idle_protect_s")


@dataclass(frozen=True)
class IdlePolicy:
    threshold_pct: int  # below this % GPU use a workload is idle
    warn_after_s: int
    suspend_after_s: int
    protect_s: int  # after a workload starts (or is resumed), nothing happens for this long

    @property
    def words(self) -> str:
        """'below 5 % GPU use: warned after 30 min, suspended after 45 min'."""
        return (
            f"below {self.threshold_pct} % GPU use: warned after "
            f"{duration_words(self.warn_after_s)}, suspended after "
            f"{duration_words(self.suspend_after_s)}"
        )


def _seconds(value: object, field: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_IDLE_S:
        raise InvalidInput(
            f"{field} must be whole seconds from {low} to {MAX_IDLE_S} (e.g. 2700 for 45 min); "
            f"not {value!r}",
            field=field,
        )
    return value


def check_idle_policy(
    threshold_pct: object, warn_after_s: object, suspend_after_s: object, protect_s: object
) -> IdlePolicy | None:
    """A pool's idle policy as a service stores it, or None when it is off (threshold null).
    Each bad value is a 400 naming its field and what to give instead."""
    if threshold_pct is None:
        return None
    if (
        isinstance(threshold_pct, bool)
        or not isinstance(threshold_pct, int)
        or not 1 <= threshold_pct <= 100
    ):
        raise InvalidInput(
            "idle_threshold_pct must be a whole percentage from 1 to 100 (e.g. 5: below 5 % GPU "
            f"use is idle), or null to turn the idle policy off; not {threshold_pct!r}",
            field="idle_threshold_pct",
        )
    warn = _seconds(warn_after_s, "idle_warn_after_s", 60)
    suspend = _seconds(suspend_after_s, "idle_suspend_after_s", 60)
    protect = _seconds(protect_s, "idle_protect_s", 0)
    if suspend <= warn:
        raise InvalidInput(
            f"idle_suspend_after_s ({suspend}) must be longer than idle_warn_after_s ({warn}): "
            "the owner is warned first and given the difference to act",
            field="idle_suspend_after_s",
        )
    return IdlePolicy(threshold_pct, warn, suspend, protect)


def strictest(policies: list[IdlePolicy | None]) -> IdlePolicy | None:
    """The policy of a workload on several pools: the one that suspends soonest (None: no pool
    has one on)."""
    on = [p for p in policies if p is not None]
    return min(on, key=lambda p: (p.suspend_after_s, p.warn_after_s)) if on else None
