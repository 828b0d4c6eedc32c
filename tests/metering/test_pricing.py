"""Exact arithmetic of chargeback on constructed intervals (pure, no database)."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from metering import pricing
from metering.pricing import ClassUsage, PriceSchedule, Span, Window

D = Decimal


def t(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


NOV = pricing.month_window(date(2026, 11, 1), UTC)
DEC = pricing.month_window(date(2026, 12, 1), UTC)
FLAT = PriceSchedule(default=D("3.5"))


def test_month_windows_in_utc_and_in_another_time_zone():
    assert NOV == Window(t(2026, 11, 1), t(2026, 12, 1))
    berlin = pricing.month_window(date(2026, 11, 17), ZoneInfo("Europe/Berlin"))
    assert berlin == Window(t(2026, 10, 31, 23), t(2026, 11, 30, 23))
    # March in New York loses an hour to daylight saving: 31 × 24 − 1 hours.
    ny = pricing.month_window(date(2026, 3, 1), ZoneInfo("America/New_York"))
    assert ny.end - ny.start == timedelta(hours=31 * 24 - 1)


def test_partial_hours_are_exact():
    span = Span(t(2026, 11, 3, 10, 0), t(2026, 11, 3, 10, 20), 1)  # 20 minutes
    assert pricing.unit_microseconds([span], NOV) == 20 * 60 * 1_000_000
    assert pricing.hours(pricing.unit_microseconds([span], NOV)) == D("0.3333")
    # 3.5 $/h × 1/3 h = 1.1666… → 1.17; never three rounded thirds.
    assert pricing.cost([span], FLAT, NOV) == D("1.17")
    thirds = [Span(t(2026, 11, 3, h, 0), t(2026, 11, 3, h, 20), 1) for h in (1, 2, 3)]
    assert pricing.cost(thirds, FLAT, NOV) == D("3.50")
    # 90 seconds and 1 microsecond
    odd = Span(t(2026, 11, 3), t(2026, 11, 3, 0, 1, 30, 1), 2)
    assert pricing.unit_microseconds([odd], NOV) == 2 * 90_000_001


def test_a_pod_straddling_midnight_and_month_end_is_split_between_months():
    span = Span(t(2026, 11, 30, 22, 30), t(2026, 12, 1, 1, 0), 2)
    assert pricing.hours(pricing.unit_microseconds([span], NOV)) == D("3.0000")  # 2 × 1.5 h
    assert pricing.hours(pricing.unit_microseconds([span], DEC)) == D("2.0000")  # 2 × 1 h
    assert pricing.cost([span], FLAT, NOV) + pricing.cost([span], FLAT, DEC) == D("17.50")


def test_the_billing_time_zone_moves_the_month_end():
    # 23:30 UTC on 30 November is 00:30 on 1 December in Berlin: all of it is December there.
    span = Span(t(2026, 11, 30, 23, 30), t(2026, 12, 1, 0, 30), 1)
    berlin_nov = pricing.month_window(date(2026, 11, 1), ZoneInfo("Europe/Berlin"))
    berlin_dec = pricing.month_window(date(2026, 12, 1), ZoneInfo("Europe/Berlin"))
    assert pricing.unit_microseconds([span], berlin_nov) == 0
    assert pricing.hours(pricing.unit_microseconds([span], berlin_dec)) == D("1.0000")
    assert pricing.hours(pricing.unit_microseconds([span], NOV)) == D("0.5000")


def test_a_price_change_mid_month_is_honoured_to_the_microsecond():
    change = t(2026, 11, 15, 12, 0)
    schedule = PriceSchedule(default=D("3.5"), changes=((change, D("4.2")),))
    assert schedule.at(change - timedelta(microseconds=1)) == D("3.5")
    assert schedule.at(change) == D("4.2")
    span = Span(t(2026, 11, 15, 11, 0), t(2026, 11, 15, 14, 0), 1)  # 1 h old, 2 h new
    assert pricing.cost([span], schedule, NOV) == D("11.90")
    # Two changes inside one interval, one before it, one after it.
    many = PriceSchedule(
        default=D("1"),
        changes=(
            (t(2026, 10, 1), D("2")),
            (t(2026, 11, 2, 1), D("3")),
            (t(2026, 11, 2, 2), D("5")),
            (t(2026, 12, 5), D("100")),
        ),
    )
    span = Span(t(2026, 11, 2, 0, 30), t(2026, 11, 2, 2, 30), 1)
    assert pricing.cost([span], many, NOV) == D("1") + D("3") + D("2.5")


def test_mig_fractions_default_to_the_gpu_price_times_compute_over_seven():
    gpu = D("3.5")
    three_g = (gpu * 3 / 7).quantize(D("0.0001"))  # what ResourceClass.price_per_hour holds
    assert three_g == D("1.5000")
    usage = ClassUsage(
        slug="a100-80gb-mig-3g.40gb",
        name="A100 3g",
        gpu_fraction=D("0.4286"),
        schedule=PriceSchedule(default=three_g),
        allocation=(Span(t(2026, 11, 1), t(2026, 11, 1, 7), 2),),  # 2 instances × 7 h
    )
    line = pricing.statement_line(usage, NOV, "allocation")
    assert line.allocated_hours == D("14.0000")
    assert line.allocated_gpu_hours == D("6.0004")  # 14 × 0.4286
    assert line.allocated_cost == D("21.00")
    one_g = (gpu / 7).quantize(D("0.0001"))
    assert one_g == D("0.5000")
    seven_1g = [Span(t(2026, 11, 1), t(2026, 11, 1, 1), 7)]
    assert pricing.cost(seven_1g, PriceSchedule(default=one_g), NOV) == D("3.50")


def test_restarts_are_one_interval_and_overlaps_are_not_counted_twice():
    # A worker that restarted saw the same pod again: its interval continues.
    pieces = [
        Span(t(2026, 11, 5, 9), t(2026, 11, 5, 10), 1),
        Span(t(2026, 11, 5, 10), t(2026, 11, 5, 12), 1),
        Span(t(2026, 11, 5, 11), t(2026, 11, 5, 11, 30), 1),
    ]
    merged = pricing.merge_spans(pieces)
    assert merged == [Span(t(2026, 11, 5, 9), t(2026, 11, 5, 12), 1)]
    assert pricing.cost(merged, FLAT, NOV) == D("10.50")
    # A pod restarted as a new pod (new uid) after a gap: two intervals, the gap is free.
    gap = [
        Span(t(2026, 11, 5, 9), t(2026, 11, 5, 10), 1),
        Span(t(2026, 11, 5, 11), t(2026, 11, 5, 12), 1),
    ]
    assert len(pricing.merge_spans(gap)) == 2
    assert pricing.cost(gap, FLAT, NOV) == D("7.00")


def test_preempted_pods_stop_counting_when_they_stop_holding_the_device():
    # Preempted at 10:17:30 (its finish time), the replacement pod scheduled at 10:18.
    victim = Span(t(2026, 11, 6, 10), t(2026, 11, 6, 10, 17, 30), 4)
    winner = Span(t(2026, 11, 6, 10, 18), None, 4)
    window = Window(NOV.start, t(2026, 11, 6, 11))  # statement drawn at 11:00
    assert pricing.unit_microseconds([victim], window) == 4 * 1050 * 1_000_000
    assert pricing.hours(pricing.unit_microseconds([victim, winner], window)) == D("3.9667")


def test_statement_bases_quota_allocation_max_and_the_idle_part():
    schedule = PriceSchedule(default=D("2"))
    usage = ClassUsage(
        slug="h100-80gb",
        name="H100",
        gpu_fraction=D("1"),
        schedule=schedule,
        allocation=(Span(t(2026, 11, 1, 0), t(2026, 11, 1, 3), 1),),  # 3 unit-h = 6 $
        quota=(Span(t(2026, 11, 1, 0), t(2026, 11, 1, 2), 2),),  # 4 unit-h = 8 $
        observed=(
            (t(2026, 11, 1, 0), D("1"), D("0.25")),
            (t(2026, 11, 1, 1), D("1"), D("0.75")),
            (t(2026, 10, 31, 23), D("1"), D("0")),  # outside the month: ignored
        ),
    )
    lines = {b: pricing.statement_line(usage, NOV, b) for b in pricing.BASES}
    assert lines["allocation"].billed_cost == D("6.00")
    assert lines["quota"].billed_cost == D("8.00")
    assert lines["max"].billed_cost == D("8.00")
    line = lines["allocation"]
    assert (line.observed_hours, line.used_hours, line.idle_hours) == (D("2"), D("1"), D("1"))
    assert line.idle_cost == D("2.00")
    statement = pricing.build_statement([usage], NOV, "max")
    assert statement.total == D("8.00") and statement.allocated_cost == D("6.00")
    with pytest.raises(ValueError):
        pricing.build_statement([usage], NOV, "cheapest")


def test_time_on_a_gpu_that_failed_under_the_pod_is_shown_and_not_billed():
    schedule = PriceSchedule(default=D("2"))
    usage = ClassUsage(
        slug="b200-180gb",
        name="B200",
        gpu_fraction=D("1"),
        schedule=schedule,
        allocation=(Span(t(2026, 11, 1, 0), t(2026, 11, 1, 3), 2),),  # 6 unit-h = 12 $
        quota=(Span(t(2026, 11, 1, 0), t(2026, 11, 1, 1), 1),),  # 1 unit-h = 2 $
        waived=(Span(t(2026, 11, 1, 2), t(2026, 11, 1, 3), 2),),  # the last hour: 2 unit-h
    )
    line = pricing.statement_line(usage, NOV, "allocation")
    assert (line.allocated_hours, line.allocated_cost) == (D("6"), D("12.00"))  # still shown
    assert (line.waived_hours, line.waived_cost) == (D("2"), D("4.00"))
    assert line.billed_cost == D("8.00")
    # under the quota basis the waiver cannot make the bill negative
    assert pricing.statement_line(usage, NOV, "quota").billed_cost == D("0.00")
    statement = pricing.build_statement([usage], NOV, "allocation")
    assert statement.total == D("8.00") and statement.waived_cost == D("4.00")
    assert line.as_dict()["waived_cost"] == "4.00"


def test_open_grants_count_to_the_window_end():
    grant = Span(t(2026, 11, 20), None, 3)
    window = Window(NOV.start, t(2026, 11, 21))
    assert pricing.hours(pricing.unit_microseconds([grant], window)) == D("72.0000")


@pytest.mark.parametrize(
    ("cost", "budget", "level"),
    [
        ("0", "100", 0),
        ("79.99", "100", 0),
        ("80", "100", 80),
        ("99.99", "100", 80),
        ("100", "100", 100),
        ("250", "100", 100),
        ("5", None, 0),
        ("5", "0", 0),
    ],
)
def test_budget_levels(cost, budget, level):
    assert pricing.budget_level(D(cost), D(budget) if budget else None) == level


def test_the_month_end_forecast_is_the_month_so_far_burn_rate():
    june = pricing.Window(datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 7, 1, tzinfo=UTC))
    day3 = datetime(2026, 6, 4, tzinfo=UTC)  # 3 of 30 days
    assert pricing.month_end_forecast(Decimal("30.00"), june, day3) == Decimal("300.00")
    assert pricing.month_end_forecast(Decimal("30.00"), june, june.end) == Decimal("30.00")
    assert pricing.month_end_forecast(Decimal("0"), june, june.start) == Decimal("0")


def test_the_fleet_split_adds_up_and_says_what_was_billed_above_it():
    s = pricing.split_fleet(Decimal("100.00"), Decimal("40.00"), Decimal("10.00"))
    assert (s.used, s.idle, s.unallocated, s.over) == (
        Decimal("30.00"),
        Decimal("10.00"),
        Decimal("60.00"),
        Decimal(0),
    )
    over = pricing.split_fleet(Decimal("100.00"), Decimal("130.00"), Decimal("200.00"))
    assert (over.idle, over.unallocated, over.over) == (Decimal("130.00"), 0, Decimal("30.00"))
    for split in (s, over):
        assert split.used + split.idle + split.unallocated - split.over == split.fleet
