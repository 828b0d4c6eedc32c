"""Row m: MIG on DRA nodes (issue 53). Each claim gets the first placement its GPU's counters
still allow, freed when the pod ends; no layout, no drain. Where the order of submission decides
the packing (first fit), the test states the order."""

from __future__ import annotations

import pytest

from catalog import facts
from replay.simulate import dra, rows
from replay.simulate.engine import Harness
from replay.simulate.fleet import Fleet, build, measure, set_up
from replay.simulate.scheduler import Pod
from replay.workload import ReplayPod, Window, ask

HOUR = 3600.0
A100 = facts.get_model("A100-80GB")
B200 = facts.get_model("B200-180GB")


def mig(model: facts.GpuModel, profile: str) -> str:
    return model.profile(profile).resource_name


def pod(name: str, resource: str, units: int = 1) -> Pod:
    return Pod(name, resource, units, 0, 0.0)


def one_gpu(model: facts.GpuModel = A100, gpus: int = 1) -> dra.DraScheduler:
    return dra.DraScheduler([dra.dra_node("node-0", model, gpus)], model)


def test_a100_devices_are_the_drivers_and_b200s_the_placement_rules():
    assert "driver" in dra.counter_source(A100)
    assert "placement rule" in dra.counter_source(B200)  # no SM count for 3g, 4g, 7g yet
    counters = dict(dra.gpu_devices(A100.key).capacity)
    assert counters["multiprocessors"] == 98 and counters["memory-slice-7"] == 1


@pytest.mark.parametrize(("model", "four", "three"), [
    (A100, "4g.40gb", "3g.40gb"), (B200, "4g.90gb", "3g.90gb"),
])  # fmt: skip
def test_a_4g_then_a_3g_share_one_gpu_and_a_second_4g_does_not_fit(model, four, three):
    s = one_gpu(model)
    assert s.submit(pod("4g", mig(model, four)))
    assert s.submit(pod("3g", mig(model, three)))
    assert [(d.profile, d.start) for d in s.dra_nodes[0].counter_sets[0].allocated] == [
        (four, 0),
        (three, 4),
    ]
    s2 = one_gpu(model)
    assert s2.submit(pod("first", mig(model, four)))
    assert not s2.submit(pod("second", mig(model, four)))


def test_first_fit_a_3g_first_takes_start_0_and_a_4g_then_waits():
    # the scheduler allocates the first device that fits: 3g at memory slices 0-3, where
    # the only 4g placement is; the order of submission decides, so the test states it
    s = one_gpu()
    assert s.submit(pod("3g", mig(A100, "3g.40gb")))
    assert not s.submit(pod("4g", mig(A100, "4g.40gb")))
    assert s.submit(pod("3g-again", mig(A100, "3g.40gb")))  # start 4 is still free


@pytest.mark.parametrize(("model", "one"), [(A100, "1g.10gb"), (B200, "1g.23gb")])
def test_seven_1g_fit_on_one_gpu_and_an_eighth_does_not(model, one):
    s = one_gpu(model)
    assert all(s.submit(pod(f"1g-{n}", mig(model, one))) for n in range(7))
    assert not s.submit(pod("eighth", mig(model, one)))  # memory slice 7 is free, compute not


def test_a_freed_placement_is_reused_at_once_with_no_drain():
    s = one_gpu()
    four, three = pod("4g", mig(A100, "4g.40gb")), pod("3g", mig(A100, "3g.40gb"))
    assert s.submit(four) and s.submit(three)
    waiting = pod("1g", mig(A100, "1g.10gb"))
    assert not s.submit(waiting)
    s.remove(three)
    assert s.retry() == [waiting]  # in the 3g's memory slices, as soon as it left
    s.remove(four)
    s.remove(waiting)
    node = s.dra_nodes[0]
    assert not node.counter_sets[0].allocated and not +node.counter_sets[0].used
    assert all(s.submit(pod(f"1g-{n}", mig(A100, "1g.10gb"))) for n in range(7))
    assert not node.cordoned  # nothing was drained or re-shaped


def test_a_whole_gpu_takes_the_whole_counter_set_and_several_need_one_node():
    s = one_gpu(gpus=2)
    assert s.submit(pod("1g", mig(A100, "1g.10gb")))
    assert not s.submit(pod("two", facts.WHOLE_GPU_RESOURCE, 2))  # GPU 0 is cut
    assert s.submit(pod("one", facts.WHOLE_GPU_RESOURCE))  # GPU 1, whole
    assert s.submit(pod("1g-beside", mig(A100, "1g.10gb")))  # GPU 0 still has room
    gpu0, gpu1 = s.dra_nodes[0].counter_sets
    assert [d.start for d in gpu0.allocated] == [0, 1]
    assert [d.profile for d in gpu1.allocated] == [None]  # the whole-GPU device


def window(*pods: tuple[float, float, int], length: float = 4 * HOUR) -> Window:
    """(arrival, run, gpu_milli) per one-GPU pod of team 0."""
    made = [ReplayPod(f"p{n}", 0, a, r, 1, m, "BE") for n, (a, r, m) in enumerate(pods)]
    return Window(0, int(length), made, 0, 0)


def run_row_m(w: Window, gpus: int = 1):
    setup = set_up(w, rows.ROWS["m"], Fleet(1, gpus, A100.key), teams=1)
    engine = build(setup, w, Harness())
    engine.run(w.length + 7 * 86400)
    return engine, measure(engine, w.length, gpus, A100.compute_slices)


def test_row_m_asks_mig_for_small_asks_too():
    small = ReplayPod("s", 0, 0, HOUR, 1, 200, "BE")  # a shared replica in rows c…l
    assert ask(small, rows.ROWS["m"], A100).slug == facts.class_slug(A100, "mig", "2g.20gb")
    assert ask(small, rows.ROWS["k"], A100).slug == facts.class_slug(A100, "shared")


def test_row_m_runs_a_4g_and_a_3g_then_seven_1g_on_one_gpu_without_drains():
    # 500 milli is a 4g, 400 a 3g, 100 a 1g; the 4g comes first (first fit: see above)
    w = window(
        (0, HOUR, 500), (1, HOUR, 400),
        *[(2 * HOUR, HOUR, 100)] * 7, (2 * HOUR + 1, HOUR, 100),
    )  # fmt: skip
    engine, r = run_row_m(w)
    starts = [j.started for j in engine.jobs]
    assert starts[:2] == [0, 1]  # 4g and 3g at once, on the one GPU
    assert starts[2:9] == [2 * HOUR] * 7  # seven 1g on the same GPU once they ended
    assert starts[9] == 3 * HOUR  # the eighth waits for one of them (slices and counters)
    assert r.reshaped_gpus == 0 and r.preemptions == 0 and r.never_started == 0


def test_row_m_submitted_3g_first_keeps_the_4g_waiting_for_it():
    w = window((0, HOUR, 400), (1, HOUR, 500))
    engine, r = run_row_m(w)
    assert [j.started for j in engine.jobs] == [0, HOUR]  # the 4g's only placement was cut
