"""The fill bench's split of a grant's unit-seconds (pure)."""

import pytest

from bench.fill_bench import unit_time


def test_running_held_and_free_add_up_over_the_window_work_waits():
    # Two units. Unit 1: held 0-10, ran 1-9; then held 11-20, ran 12-20. Unit 2: held 0-20,
    # ran 0-20. The window is first to last admission: 0-11.
    held = [(0.0, 10.0), (11.0, 20.0), (0.0, 20.0)]
    ran = [(1.0, 9.0), (12.0, 20.0), (0.0, 20.0)]
    split = unit_time(held, ran, units=2)
    assert split["window_s"] == 11.0
    assert split["running"] == pytest.approx((8 + 11) / 22)
    assert split["held_idle"] == pytest.approx((10 + 11 - 19) / 22)
    assert split["free"] == pytest.approx(1 / 22)  # unit 1 between release and admission
    assert split["running"] + split["held_idle"] + split["free"] == pytest.approx(1.0)


def test_nothing_held_is_all_zero():
    assert unit_time([], [], units=4)["running"] == 0.0
