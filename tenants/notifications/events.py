"""The events the portal tells people about, and who hears of each: pure data."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Audience(StrEnum):
    """Whom an event's personal e-mail goes to (channels come on top of it)."""

    APPROVERS = "approvers"  # platform admins with an e-mail address
    OWNERS = "owners"  # the tenant's owners
    PERSON = "person"  # the one person the caller names (requester, submitter)
    DEPARTMENT_ADMINS = "department_admins"  # the admins of the department the caller names
    NOBODY = "nobody"  # channels only


@dataclass(frozen=True)
class Event:
    name: str
    description: str
    audience: Audience
    # Sent to the platform team's channels unless a channel picks its events itself.
    for_platform: bool = False


EVENTS: dict[str, Event] = {
    e.name: e
    for e in (
        Event(
            "capacity_request.submitted",
            "An ask waits for a platform admin (or its team's department admin)",
            Audience.APPROVERS,
            for_platform=True,
        ),
        Event("capacity_request.decided", "An ask was approved or rejected", Audience.PERSON),
        Event("grant.started", "A booked grant's window started", Audience.OWNERS),
        Event("grant.expiring", "A grant ends within the warning window", Audience.OWNERS),
        Event("grant.expired", "A grant ended", Audience.OWNERS),
        Event(
            "api_token.expiry_set",
            "A token made without an end was given one (the platform's longest)",
            Audience.PERSON,
        ),
        Event(
            "api_token.revoked_with_maker",
            "A CI robot token was revoked as the person who made it left the team",
            Audience.OWNERS,
        ),
        Event("workload.preempted", "A workload was preempted", Audience.PERSON),
        Event("workload.failed", "A workload failed", Audience.PERSON),
        Event(
            "workload.stopped_over_quota",
            "Work above a lowered grant was stopped",
            Audience.OWNERS,
        ),
        Event(
            "workload.reclaimed",
            "Work on borrowed GPUs was given back to their lender",
            Audience.OWNERS,
        ),
        Event(
            "workload.idle_warning",
            "A workload held GPUs below its pool's idle threshold: it will be suspended",
            Audience.PERSON,
        ),
        Event(
            "workload.idle_suspended",
            "A workload was suspended for holding idle GPUs (its team may resume it)",
            Audience.PERSON,
        ),
        Event("budget.reached_80", "A team used 80 % of its monthly budget", Audience.OWNERS),
        Event(
            "budget.forecast_over",
            "A team is on course to pass its monthly budget by the month's end",
            Audience.OWNERS,
        ),
        Event(
            "budget.reached_100",
            "A team used its whole monthly budget",
            Audience.OWNERS,
            for_platform=True,
        ),
        Event(
            "department.budget_reached_80",
            "A department's teams used 80 % of its monthly budget",
            Audience.DEPARTMENT_ADMINS,
        ),
        Event(
            "department.budget_forecast_over",
            "A department is on course to pass its monthly budget by the month's end",
            Audience.DEPARTMENT_ADMINS,
            for_platform=True,
        ),
        Event(
            "department.budget_reached_100",
            "A department's teams used its whole monthly budget",
            Audience.DEPARTMENT_ADMINS,
            for_platform=True,
        ),
        Event(
            "tenant.no_owner",
            "A team has no owner left (single sign-on took the last one's role)",
            Audience.APPROVERS,
            for_platform=True,
        ),
        Event(
            "gpu.health",
            "A GPU health action (cordon, drain, return)",
            Audience.NOBODY,
            for_platform=True,
        ),
    )
}


def event(name: str) -> Event:
    try:
        return EVENTS[name]
    except KeyError:
        raise ValueError(f"unknown notification event {name!r}; known: {sorted(EVENTS)}") from None


def channel_wants(channel_events: list[str], name: str, *, platform_channel: bool) -> bool:
    """Whether a channel receives event `name`: its own list when it has one; otherwise every
    event of its tenant (a tenant's channel) or the platform team's events (a platform one)."""
    if channel_events:
        return name in channel_events
    return EVENTS[name].for_platform if platform_channel else True
