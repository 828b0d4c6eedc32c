"""The ask form's arithmetic (pure): how long a preset lasts, when the ask ends, what it costs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

CUSTOM = "custom"
OPEN_ENDED = "open"
# key -> (label, length); the order is the form's
DURATION_PRESETS: dict[str, tuple[str, timedelta]] = {
    "1d": ("1 day", timedelta(days=1)),
    "3d": ("3 days", timedelta(days=3)),
    "7d": ("1 week", timedelta(days=7)),
}
DURATION_CHOICES: list[tuple[str, str]] = [
    *((key, label) for key, (label, _) in DURATION_PRESETS.items()),
    (CUSTOM, "Until a date"),
    (OPEN_ENDED, "No end date (always reviewed)"),
]
HOURS_PER_MONTH = Decimal(730)  # 365 × 24 / 12, as cloud price sheets count a month


def default_duration(max_hours: list[int]) -> str:
    """The ask form's preset duration: the longest one that every auto-approval envelope in
    `max_hours` accepts, so a small ask is approved at once as it comes; the shortest preset
    when none is that short or there is no envelope (never open-ended, which a platform admin
    must always review)."""
    longest = timedelta(hours=min(max_hours, default=0))
    fitting = [key for key, (_, length) in DURATION_PRESETS.items() if length <= longest]
    return fitting[-1] if fitting else next(iter(DURATION_PRESETS))


def ends_at_for(duration: str, *, now: datetime, custom: datetime | None) -> datetime | None:
    """When an ask of `duration` made at `now` ends: None when open-ended; `custom` as given
    (the service refuses one in the past, for the preview and the submit alike)."""
    if duration in DURATION_PRESETS:
        return now + DURATION_PRESETS[duration][1]
    if duration == CUSTOM:
        return custom
    return None


@dataclass(frozen=True)
class CostEstimate:
    per_hour: Decimal
    total: Decimal | None  # for the whole ask; None when open-ended
    per_month: Decimal  # at the hourly price, for an open-ended ask


def _cents(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def cost_estimate(
    *, price_per_hour: Decimal, amount: int, starts_at: datetime, ends_at: datetime | None
) -> CostEstimate:
    """List price of holding `amount` units from `starts_at` to `ends_at` (whether used or not)."""
    per_hour = Decimal(price_per_hour) * amount
    total = None
    if ends_at is not None and ends_at > starts_at:
        hours = Decimal((ends_at - starts_at).total_seconds()) / Decimal(3600)
        total = _cents(per_hour * hours)
    return CostEstimate(_cents(per_hour), total, _cents(per_hour * HOURS_PER_MONTH))
