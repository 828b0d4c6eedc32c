"""The pooled reference: the rows' asks from one pool, no nodes, no quotas."""

from __future__ import annotations

import math

import pytest

from catalog import facts
from replay.simulate import pooled, rows
from replay.workload import ReplayPod, Window

HOUR = 3600.0
B200 = facts.get_model("B200-180GB")


def window(*pods: tuple[float, float, int, int]) -> Window:
    """(arrival, run, num_gpu, gpu_milli) per pod."""
    made = [ReplayPod(f"p{n}", 0, a, r, g, m, "BE") for n, (a, r, g, m) in enumerate(pods)]
    return Window(0, int(2 * HOUR), made, 0, 0)


def test_asks_wait_for_room_in_order_and_smaller_ones_backfill():
    w = window((0, HOUR, 1, 1000), (0, HOUR, 2, 1000), (0, HOUR, 1, 1000))
    r = pooled.serve(w, pooled.sizes(w, rows.ROWS["k"], B200, "shape"), gpus=2)
    # the 2-GPU ask waits an hour for room; the third, one GPU, passes it and starts at once
    assert r.wait_p95_s == HOUR
    assert r.alloc_milli == pytest.approx((1 + 1 + 2) * 1000 / 1000 / (2 * 2))


def test_shapes_round_up_and_milli_does_not():
    w = window((0, HOUR, 1, 300), (0, HOUR, 1, 300), (0, HOUR, 1, 300))
    shape = pooled.sizes(w, rows.ROWS["k"], B200, "shape")
    assert shape == [3 / 7] * 3  # 300 milli: a 3g of 7 slices
    assert pooled.sizes(w, rows.ROWS["k"], B200, "milli") == [0.3] * 3
    assert pooled.serve(w, shape, gpus=1).wait_p95_s == HOUR  # two 3g fit a GPU, not three
    assert pooled.serve(w, [0.3] * 3, gpus=1).wait_p95_s == 0


def test_an_ask_larger_than_the_pool_never_starts_and_the_search_finds_the_least():
    w = window((0, HOUR, 8, 1000), (0, HOUR, 1, 1000))
    size = pooled.sizes(w, rows.ROWS["a"], B200, "shape")
    assert math.isinf(pooled.serve(w, size, gpus=4).wait_p95_s)
    found = pooled.smallest(w, size, gpus_per_node=4, wait_limit_s=0, up_to=4)
    assert found is not None and found.gpus == 12  # 8 + 1 at once: three nodes of four
    assert pooled.smallest(w, size, gpus_per_node=4, wait_limit_s=0, up_to=2) is None
