"""The ask form's durations and cost estimate (pure functions, no database)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from tenants.asking import cost_estimate, ends_at_for

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


def test_presets_end_that_long_after_now():
    assert ends_at_for("1d", now=NOW, custom=None) == NOW + timedelta(days=1)
    assert ends_at_for("3d", now=NOW, custom=None) == datetime(2026, 3, 5, 9, 30, tzinfo=UTC)
    assert ends_at_for("7d", now=NOW, custom=NOW) == NOW + timedelta(weeks=1)  # preset wins


def test_custom_is_taken_as_given_and_open_ended_has_no_end():
    past = NOW - timedelta(days=1)  # the service refuses it, for the hint and the submit alike
    assert ends_at_for("custom", now=NOW, custom=past) == past
    assert ends_at_for("custom", now=NOW, custom=None) is None
    assert ends_at_for("open", now=NOW, custom=past) is None


def test_cost_of_a_week_and_of_an_open_ended_month():
    week = cost_estimate(
        price_per_hour=Decimal("1.93"), amount=2, starts_at=NOW, ends_at=NOW + timedelta(days=7)
    )
    assert (week.per_hour, week.total) == (Decimal("3.86"), Decimal("648.48"))
    open_ended = cost_estimate(price_per_hour=Decimal("1.5"), amount=1, starts_at=NOW, ends_at=None)
    assert (open_ended.total, open_ended.per_month) == (None, Decimal("1095.00"))
    past = cost_estimate(
        price_per_hour=Decimal("1.5"), amount=1, starts_at=NOW, ends_at=NOW - timedelta(hours=1)
    )
    assert past.total is None


def test_the_default_duration_is_the_longest_preset_every_envelope_accepts():
    """Never open-ended (which a platform admin always reviews): issue 49, 9."""
    from tenants.asking import OPEN_ENDED, default_duration

    assert default_duration([72, 168, 24]) == "1d"  # the seed's rules: 1 day fits them all
    assert default_duration([72, 168]) == "3d"
    assert default_duration([168]) == "7d" and default_duration([10_000]) == "7d"
    assert default_duration([12]) == "1d"  # none that short: the shortest, still bounded
    assert default_duration([]) == "1d" != OPEN_ENDED  # no rule at all
