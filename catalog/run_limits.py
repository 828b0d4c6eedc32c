"""Maximum run time (issue 30): how long a job may run before Kueue stops it.

A pool may set one for the jobs on its resource class, a team one for all its jobs; a job gets
the smallest that applies to it, fixed when it is submitted (Kueue's label on a running Job is
immutable, and a job is told at submit when it will be stopped). Kueue enforces it: the Job
carries `kueue.x-k8s.io/max-exec-time-seconds`, its Workload `spec.maximumExecutionTimeSeconds`,
and once the Workload has been admitted for that long (time admitted before a preemption
counts) Kueue deactivates it, which suspends the Job and frees its quota.

Pure: the bound, the rule and the words; no Django.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.errors import InvalidInput

# Kueue's maximumExecutionTimeSeconds is an int32.
MAX_RUN_S = 2**31 - 1


def check_max_run_s(value: object, field: str = "max_run_s") -> int | None:
    """A limit as a service stores it: whole seconds ≥ 1, or None for no limit; anything else
    is a 400 that says what to change."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RUN_S:
        raise InvalidInput(
            f"{field} must be whole seconds from 1 to {MAX_RUN_S} (e.g. 14400 for 4 h), or "
            f"null for no limit; not {value!r}",
            field=field,
        )
    return value


def smallest_limit(*limits: int | None) -> int | None:
    """The limit a job gets: the smallest of those that are set (None: no limit at all)."""
    set_ = [n for n in limits if n is not None]
    return min(set_) if set_ else None


def job_limit(tenant_limit: int | None, classes: Iterable) -> int | None:
    """A job's maximum run time: the smallest of its team's and its classes' pools' (a class
    without a pool sets none)."""
    pools = [getattr(rc, "pool", None) for rc in classes]
    return smallest_limit(tenant_limit, *(pool.max_run_s for pool in pools if pool is not None))


def duration_words(seconds: int) -> str:
    """A duration as people say it, to the minute: "4 h", "1 h 30 min", "2 d 3 h", "45 s"."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "min")]
    words = [f"{n} {unit}" for n, unit in parts if n]
    return " ".join(words[:2])
