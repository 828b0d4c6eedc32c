"""The scale benches' arithmetic, on small made-up figures (pure: no database, no cluster)."""

import math

from bench.reconcile_bench import slope_checks
from bench.scale_report import Measure, growth, per_thousand, percentile, slope_rows, table


def test_percentiles_are_samples_taken_nearest_rank():
    samples = [0.1 * i for i in range(1, 21)]  # 0.1 … 2.0
    assert percentile(samples, 50) == samples[9]
    assert percentile(samples, 95) == samples[18]
    assert percentile(samples, 99) == samples[19]  # of 20 samples, the largest
    assert math.isnan(percentile([], 95))


def test_growth_says_linear_as_one_and_quadratic_as_the_size_ratio():
    assert growth(2.0, 20.0, 1000, 10_000) == (10.0, 1.0)
    assert growth(1.0, 100.0, 1000, 10_000) == (100.0, 10.0)
    assert all(math.isnan(x) for x in growth(0.0, 1.0, 1000, 10_000))
    assert per_thousand(3.0, 20_000) == 0.15


def test_slopes_go_from_the_smallest_size_to_the_largest_and_flag_the_steep():
    measures = [
        Measure("render", 1000, 5.0, 7),
        Measure("render", 10_000, 52.0, 7),
        Measure("page", 5000, 0.2, 10),
        Measure("page", 20_000, 0.3, 10),
        Measure("page", 50_000, 4.0, 20),
        Measure("once", 5000, 1.0),
    ]
    rows = {row[0]: row for row in slope_rows(measures)}
    assert set(rows) == {"render", "page"}
    assert rows["render"][1:5] == (1000, 10_000, 10.4, 1.04)
    assert rows["page"][1:3] == (5000, 50_000) and rows["page"][5] == 2.0
    printed = table(measures)
    assert "super-linear?" in printed.splitlines()[-1]  # page: 20 × for 10 × the size
    assert "super-linear?" not in printed.splitlines()[-2]


def test_the_reconcile_slope_checks_the_issues_goals():
    def rows(cold, noop_calls, noop_writes, floor):
        return [
            ("cold", cold, 0, 0),
            ("no-op", 1.0, noop_calls, noop_writes),
            ("kubectl", floor, 0, 0),
        ]

    checks = slope_checks({1000: rows(100.0, 15, 0, 90.0), 10_000: rows(1040.0, 15, 0, 950.0)})
    assert [(name, ok) for name, _, _, ok in checks] == [
        ("cold 10000 / cold 1000", True),
        ("kubectl 10000 / kubectl 1000", True),
        ("no-op calls 10000 / 1000", True),
        ("no-op writes at 10000", True),
    ]
    steep = slope_checks({1000: rows(100.0, 15, 0, 90.0), 10_000: rows(1100.0, 16, 2, 950.0)})
    assert [ok for *_, ok in steep] == [False, True, False, False]


def test_the_reconcile_slope_leaves_out_kubectl_where_a_size_ran_no_floor():
    lo = [("cold", 100.0, 0, 0), ("no-op", 1.0, 15, 0), ("kubectl", 90.0, 0, 0)]
    hi = [("cold", 1300.0, 0, 0), ("no-op", 9.0, 15, 0)]  # floor not run at 10,000
    checks = slope_checks({1000: lo, 10_000: hi})
    assert [(name, ok) for name, _, _, ok in checks] == [
        ("cold 10000 / cold 1000", False),
        ("no-op calls 10000 / 1000", True),
        ("no-op writes at 10000", True),
    ]
