"""Capacity over time as pure functions: the sweep, the check at every instant, the earliest
window that fits and the calendar (tenants/capacity_time.py)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from tenants.capacity_time import Hold, calendar, earliest_fit, overruns, peaks, profile

T0 = datetime(2026, 12, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def hold(amount, start_day, end_day=None, key="a100", holder="", ref=None):
    end = None if end_day is None else T0 + end_day * DAY
    return Hold(key, amount, T0 + start_day * DAY, end, holder, ref)


def test_back_to_back_grants_never_add_up():
    holds = [hold(8, 0, 3), hold(8, 3, 6)]
    assert peaks(holds, T0, T0 + 6 * DAY) == {"a100": 8}


def test_overlapping_grants_add_up_only_where_they_overlap():
    p = profile([hold(3, 0, 4), hold(5, 2, 6)])
    assert p.peak(T0, T0 + 2 * DAY) == 3
    assert p.peak(T0 + 2 * DAY, T0 + 4 * DAY) == 8
    assert p.peak(T0 + 4 * DAY, None) == 5
    assert p.level_at(T0 + 6 * DAY) == 0


def test_an_open_ended_grant_holds_every_instant_from_its_start():
    p = profile([hold(4, 10)])
    assert p.peak(T0, T0 + 10 * DAY) == 0
    assert p.peak(T0 + 400 * DAY, T0 + 401 * DAY) == 4


def test_the_sum_of_all_future_grants_is_not_the_limit():
    """Three grants of 8 one after the other fit a pool of 8: today's sum-all check said 24."""
    holds = [hold(8, 0, 3), hold(8, 3, 6), hold(8, 6, 9)]
    assert overruns({"a100": 8}, holds[1:], {"a100": 8}, T0, T0 + 3 * DAY) == []


def test_an_overlapping_ask_is_refused_at_the_first_busy_instant_with_its_room():
    holds = [hold(6, 3, 6, holder="team-b")]
    [over] = overruns({"a100": 8}, holds, {"a100": 4}, T0 + DAY, T0 + 4 * DAY)
    assert (over.held, over.room, over.at) == (6, 2, T0 + 3 * DAY)
    assert over.open_ended == ()


def test_an_open_ended_grant_that_blocks_is_named():
    blocker = hold(8, 0, None, holder="team-a", ref=7)
    [over] = overruns({"a100": 8}, [blocker], {"a100": 1}, T0 + 30 * DAY, T0 + 31 * DAY)
    assert over.open_ended == (blocker,)


def test_a_key_with_no_limit_has_nothing_to_give():
    [over] = overruns({}, [], {"h100": 1}, T0, None)
    assert (over.limit, over.room) == (0, 0)


def test_limits_in_fractions_are_checked_per_instant():
    holds = [hold(Decimal("0.5"), 0, 2, key="t"), hold(Decimal("0.5"), 2, 4, key="t")]
    assert overruns({"t": Decimal(1)}, holds, {"t": Decimal("0.5")}, T0, T0 + 4 * DAY) == []
    assert overruns({"t": Decimal(1)}, holds, {"t": Decimal("0.6")}, T0, T0 + DAY)


def test_the_earliest_window_of_the_same_length_that_fits():
    holds = [hold(8, 0, 3), hold(4, 3, 5), hold(2, 5, 9)]
    fit = earliest_fit(8, holds, 5, not_before=T0, length=2 * DAY, latest_start=T0 + 60 * DAY)
    assert fit == T0 + 5 * DAY
    fit = earliest_fit(8, holds, 4, not_before=T0, length=2 * DAY, latest_start=T0 + 60 * DAY)
    assert fit == T0 + 3 * DAY


def test_no_window_fits_before_the_horizon():
    holds = [hold(8, 0, 30)]
    assert earliest_fit(8, holds, 1, not_before=T0, length=DAY, latest_start=T0 + 10 * DAY) is None
    assert earliest_fit(8, [hold(8, 0)], 1, not_before=T0, length=None, latest_start=T0) is None


def test_an_open_ended_ask_fits_only_where_nothing_returns():
    holds = [hold(8, 0, 2), hold(8, 5, 7)]
    fit = earliest_fit(8, holds, 1, not_before=T0, length=None, latest_start=T0 + 60 * DAY)
    assert fit == T0 + 7 * DAY


def test_the_calendar_splits_granted_from_booked_at_each_days_busiest_instant():
    holds = [hold(2, -1, 2, holder="a"), hold(5, 1, 3, holder="b"), hold(1, 2, None, holder="c")]
    slots = calendar(8, holds, now=T0, start=T0, steps=4, step=DAY)
    assert [(s.granted, s.booked, s.free) for s in slots] == [
        (2, 0, 6),
        (2, 5, 1),
        (0, 6, 2),
        (0, 1, 7),
    ]
    assert slots[1].holders == ("a", "b")
    assert slots[3].holders == ("c",)


def test_a_pool_over_committed_since_shows_no_free_units():
    [slot] = calendar(4, [hold(6, 0, 2)], now=T0, start=T0, steps=1, step=DAY)
    assert (slot.granted, slot.free) == (6, 0)
