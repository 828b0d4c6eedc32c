"""Row l's assumption: the last 20 % of every run idle, suspended after 30 min of it."""

import pytest

from replay.simulate import idle, rows
from replay.workload import ReplayPod, Window

HOUR = 3600.0


def window(*runs: float) -> Window:
    pods = [ReplayPod(f"p{n}", 0, 0.0, r, 1, 500, "BE") for n, r in enumerate(runs)]
    return Window(0, int(24 * HOUR), pods, 0, 0)


def test_only_runs_whose_idle_tail_outlasts_the_policy_are_cut():
    w = window(HOUR, 10 * HOUR)
    cut = idle.given_back(w, suspend_after_s=30 * 60)
    # 1 h: 12 min idle, under 30 min: untouched. 10 h: 2 h idle: ends 30 min into it.
    assert [p.run for p in cut.pods] == [HOUR, 8 * HOUR + 30 * 60]
    assert idle.idle_gpu_hours(w, 30 * 60) == pytest.approx(1.5 * 0.5)  # 1.5 h of half a GPU
    assert idle.given_back(w, 0) is w  # no policy: nothing changes


def test_row_l_is_row_k_with_the_policy():
    k, l_ = rows.ROWS["k"], rows.ROWS["l"]
    assert l_.idle_suspend_s == rows.IDLE_SUSPEND_S and k.idle_suspend_s == 0
    assert l_.elastic_layouts and l_.slices and l_.sized_sharing
