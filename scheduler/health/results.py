"""What one GPU health check or enforcement did: each step adds to a `HealthCheck` (events
opened and closed, nodes tainted and untainted, pods evicted or held by a PodDisruptionBudget),
and the tasks return it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class HealthCheck:
    unknown: str = ""  # why health is unknown (Prometheus unreachable); empty: it was read
    opened: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    tainted: list[str] = field(default_factory=list)
    untainted: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
