"""The auto-approval policy: pure functions, no database."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal


@dataclass(frozen=True)
class Envelope:
    max_amount: int
    max_duration_hours: int


@dataclass(frozen=True)
class AskedItem:
    resource_class: str
    amount: int
    gpu_fraction: Decimal


@dataclass(frozen=True)
class Decision:
    auto_approve: bool
    reasons: list[str] = field(default_factory=list)


def evaluate(
    items: list[AskedItem],
    *,
    starts_at: datetime,
    ends_at: datetime | None,
    envelopes: Mapping[str, Envelope],
    held: Mapping[str, int],
) -> Decision:
    """Auto-approve only when every item is inside its class's envelope. `held` is what the
    tenant holds already through auto-approval, by class: the envelope bounds that plus the
    ask, or many small asks would add up to any amount without a human. The reasons say, in
    words a requester understands, why an ask goes to the platform team instead."""
    reasons: list[str] = []
    hours = None if ends_at is None else (ends_at - starts_at).total_seconds() / 3600
    for item in items:
        envelope = envelopes.get(item.resource_class)
        if envelope is None:
            reasons.append(f"{item.resource_class}: no auto-approval for this class")
            continue
        already = held.get(item.resource_class, 0)
        if already and already + item.amount > envelope.max_amount:
            reasons.append(
                f"{item.resource_class}: the team holds {already} approved automatically "
                f"already; {item.amount} more makes {already + item.amount}, more than the "
                f"{envelope.max_amount} approved automatically"
            )
        elif item.amount > envelope.max_amount:
            reasons.append(
                f"{item.resource_class}: {item.amount} is more than the "
                f"{envelope.max_amount} approved automatically"
            )
        if hours is None:
            reasons.append(f"{item.resource_class}: open-ended asks need a platform admin")
        elif hours > envelope.max_duration_hours:
            reasons.append(
                f"{item.resource_class}: {hours:.0f} h is longer than the "
                f"{envelope.max_duration_hours} h approved automatically"
            )
    return Decision(auto_approve=not reasons, reasons=reasons)


def gpu_equivalents(items: list[AskedItem]) -> Decimal:
    return sum((item.gpu_fraction * item.amount for item in items), Decimal(0))
