"""Row k: layouts that follow the queue, in the simulator. The scheduler model knows which GPU
each pod holds; the portal's own decision (`scheduler.mig.elastic`) re-shapes idle GPUs only,
after the asks waited `min_wait_s`, with the node cordoned while it changes."""

from __future__ import annotations

import pytest

from catalog import facts
from replay.simulate import elastic as loop
from replay.simulate import rows
from replay.simulate.engine import Harness
from replay.simulate.fleet import Fleet, build, measure, set_up
from replay.simulate.scheduler import gpu_node
from replay.workload import ReplayPod, Window
from scheduler.mig.planner import WHOLE, Shape

HOUR = 3600.0
B200 = facts.get_model("B200-180GB")
ALL_1G = Shape.mig({"1g.23gb": 7})
MIG_1G, MIG_3G = "nvidia.com/mig-1g.23gb", "nvidia.com/mig-3g.90gb"


def test_pods_hold_units_on_the_first_gpus_and_give_them_back():
    node = gpu_node("n", B200, [ALL_1G, ALL_1G])
    held = node.take(MIG_1G, 8)
    assert [(g.index, n) for g, n in held] == [(0, 7), (1, 1)]
    assert node.free(MIG_1G) == 6


def test_an_idle_gpu_is_reshaped_and_a_busy_one_never():
    node = gpu_node("n", B200, [ALL_1G, ALL_1G])
    node.take(MIG_1G, 1)  # on GPU 0
    node.reshape(B200, 1, WHOLE)
    assert node.allocatable == {MIG_1G: 7, facts.WHOLE_GPU_RESOURCE: 1}
    with pytest.raises(AssertionError, match="busy"):
        node.reshape(B200, 0, WHOLE)
    node.cordoned = True
    assert node.free(MIG_1G) == 0  # cordoned: nothing new binds


def window(*pods: tuple[float, float, int], length: float = 4 * HOUR) -> Window:
    """(arrival, run, gpu_milli) per one-GPU pod of team 0."""
    made = [ReplayPod(f"p{n}", 0, a, r, 1, m, "BE") for n, (a, r, m) in enumerate(pods)]
    return Window(0, int(length), made, 0, 0)


def run_on_1g_layouts(key: str, w: Window, layouts=(ALL_1G, ALL_1G)):
    """The row on one node of two GPUs laid out so (7 × 1g each by default), whatever the
    planner chose."""
    setup = set_up(w, rows.ROWS[key], Fleet(1, 2), teams=1)
    engine = build(setup, w, Harness())
    node = engine.scheduler.nodes[0]
    for g, shape in zip(node.gpus, layouts, strict=True):
        node.reshape(B200, g.index, shape)
    engine.run(w.length + 7 * 86400)
    return engine, measure(engine, w.length, 2, B200.compute_slices)


def test_a_backlog_of_3g_on_1g_layouts_turns_into_3g_instances():
    w = window((0, HOUR, 400), (0, HOUR, 400))  # 400 milli: a 3g ask
    engine, r = run_on_1g_layouts("k", w)
    settings = loop.Settings()
    wait = settings.policy.min_wait_s
    latest = wait + settings.period_s + settings.reconfig_s
    assert r.never_started == 0
    assert all(wait <= x <= latest for x in r.waits), r.waits
    assert r.reshaped_gpus == 1  # one GPU holds both 3g asks
    assert engine.elastic is not None and "2 × 3g.90gb" in engine.elastic.reasons[0]


def test_without_elastic_layouts_the_same_backlog_never_starts():
    w = window((0, HOUR, 400), (0, HOUR, 400))
    engine, r = run_on_1g_layouts("j", w)
    assert engine.elastic is None and r.never_started == 2


def test_running_work_is_never_disturbed():
    # A whole-GPU pod runs on GPU 0 for the whole window; the 3g backlog gets GPU 1 only.
    w = window((0, 4 * HOUR, 1000), (60, HOUR, 400), (60, HOUR, 400), (60, HOUR, 400))
    engine, r = run_on_1g_layouts("k", w, (WHOLE, ALL_1G))
    assert r.preemptions == 0
    assert engine.jobs[0].runs == [(0.0, 4 * HOUR)]  # one run, never interrupted
    shapes = [g.shape for g in engine.scheduler.nodes[0].gpus]
    assert shapes[0] == WHOLE and shapes[1] != ALL_1G
    assert r.never_started == 0  # the third 3g ran once the first two were done
