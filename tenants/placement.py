"""Where a team's granted work runs, in a fleet of clusters (issue 54): on the portal's own
cluster (""), on one worker (`cluster:<name>`) or on any worker of a group (`group:<name>`),
as MultiKueue dispatches it. Pure: the spelling and its words; whether a worker or group is
registered is the cluster layer's answer (`hooks.placement_problem`).

A team's grants in force share one placement: MultiKueue's admission check applies to a whole
ClusterQueue (Kueue refuses it per flavor, `MultiKueueAdmissionCheckAppliedPerFlavor`), and a
team has one ClusterQueue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HOME = ""
_SPELLING = re.compile(r"^(cluster|group):([a-z0-9]([-a-z0-9]*[a-z0-9])?)$")
MAX_NAME = 40  # as scheduler/cluster/fleet.py's names and groups


class BadPlacement(ValueError):
    """Not a placement: the message says how to write one."""


@dataclass(frozen=True)
class Placement:
    kind: str  # "home", "cluster" or "group"
    name: str = ""

    @property
    def is_home(self) -> bool:
        return self.kind == "home"

    def __str__(self) -> str:
        return HOME if self.is_home else f"{self.kind}:{self.name}"


def parse(value: str) -> Placement:
    """`""` (the portal's own cluster), `cluster:<worker>` or `group:<group>`."""
    value = (value or "").strip()
    if not value:
        return Placement("home")
    match = _SPELLING.match(value)
    if match is None or len(match.group(2)) > MAX_NAME:
        raise BadPlacement(
            f"{value!r} is not a placement: leave it empty for the portal's own cluster, or say "
            "`cluster:<worker>` for one worker or `group:<group>` for any worker of a group"
        )
    return Placement(match.group(1), match.group(2))


def describe(value: str) -> str:
    """In words, for pages and messages."""
    try:
        where = parse(value)
    except BadPlacement:
        return value
    if where.is_home:
        return "the portal's own cluster"
    if where.kind == "cluster":
        return f"worker {where.name}"
    return f"any worker of group {where.name}"
