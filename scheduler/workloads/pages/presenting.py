"""How a workload reads on its pages (pure): the state's note without repeating the state, the
command as typed, run time, how its cost stands to the bill, why there are no logs."""

from __future__ import annotations

import shlex
from datetime import datetime, timedelta

from scheduler.workloads.lifecycle.pods import SIMULATED


def state_note(state_label: str, reason: str) -> str:
    """The reason next to a state, unless it only says the state again ("Running" next to
    Running, "Cancelled" next to Cancelled)."""
    reason = (reason or "").strip()
    if not reason or reason.casefold() == (state_label or "").casefold():
        return ""
    return reason


def command_line(command: list[str] | None, args: list[str] | None) -> str:
    """The command and its arguments quoted as a shell reads them back."""
    return shlex.join([*(command or []), *(args or [])])


def run_time(
    started_at: datetime | None, finished_at: datetime | None, now: datetime
) -> timedelta | None:
    if started_at is None:
        return None
    return max(timedelta(0), (finished_at or now) - started_at)


def plain_duration(span: timedelta | None) -> str:
    """ "2 h 05 min", "4 min 10 s", "12 s"; "" for none."""
    if span is None:
        return ""
    seconds = int(span.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {seconds:02d} s"
    return f"{seconds} s"


# How a workload's cost stands to what its team pays, per billing basis (BILLING_BASIS).
_BILLING_WORDS = {
    "allocation": "billed to the team: what its pods were seen to hold, priced as the team's "
    "statement prices it",
    "quota": "of use, priced as the statement prices it; the team is billed for its grant "
    "(quota basis), so this is within what it pays already",
    "max": "of use, priced as the statement prices it; the team is billed the larger of its "
    "use and its grant (max basis)",
}


def billing_words(basis: str) -> str:
    return _BILLING_WORDS.get(basis, _BILLING_WORDS["allocation"])


def logs_unavailable_message(*, on_cluster: bool, finished: bool, detail: str) -> str:
    """What to tell a person when there are no logs to show, instead of the API's error."""
    if "runs on a simulated node" in detail:
        return f"No logs: {SIMULATED[0].upper()}{SIMULATED[1:]}."
    if not on_cluster:
        return "No logs: they appear once the workload's pod has started."
    if "has no pod" in detail:
        if finished:
            return "No logs: the workload has finished and its pods are gone."
        return "No logs: the workload has no pod at the moment (it may be waiting)."
    return "No logs: the cluster does not serve this pod's logs right now; try again in a moment."
