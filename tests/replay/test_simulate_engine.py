"""The simulator end to end on small hand-made windows: it follows render's manifests, it
refuses by the portal's rule, preemption loses the run so far, rows and the fleet search."""

from __future__ import annotations

import math

import pytest

from catalog import facts
from replay import trace
from replay.simulate import kueue as kq
from replay.simulate import rows, slice_quota
from replay.simulate.engine import Harness
from replay.simulate.fleet import Fleet, build, set_up, simulate
from replay.workload import POLICIES, ReplayPod, Window, select_window

HOUR = 3600.0


def window(*pods: tuple[int, float, float, int, int, str], length: float = 4 * HOUR) -> Window:
    """(team, arrival, run, num_gpu, gpu_milli, qos) per pod."""
    made = [
        ReplayPod(f"p{n}", team, arrival, run, gpus, milli, qos)
        for n, (team, arrival, run, gpus, milli, qos) in enumerate(pods)
    ]
    return Window(0, int(length), made, 0, 0)


def test_the_simulator_follows_the_rendered_quota():
    w = window(
        (0, 0, HOUR, 1, 1000, "BE"), (0, 0, HOUR, 1, 1000, "BE"), (1, 0, HOUR, 1, 1000, "BE")
    )
    setup = set_up(w, POLICIES["a"], Fleet(1, 4), teams=2)
    engine = build(setup, w, Harness())
    quota = engine.kueue.queues[setup.namespaces[0]].quotas[("b200-180gb", "nvidia.com/gpu")]
    assert quota.nominal == setup.grants[(0, "b200-180gb")]
    # change the rendered limit: the simulated queue follows it, and so does the refusal
    for r in setup.cluster_queues[0]["spec"]["resourceGroups"][1]["flavors"][0]["resources"]:
        r["nominalQuota"] = "0"
    engine = build(setup, w, Harness())
    assert (
        engine.kueue.queues[setup.namespaces[0]].quotas[("b200-180gb", "nvidia.com/gpu")].nominal
        == 0
    )
    result = simulate(w, setup)
    assert result.refused == 2  # team 1's pods can never run: grant 0, borrowing limit 0


def test_waits_and_allocation_on_one_gpu():
    w = window((0, 0, HOUR, 1, 500, "BE"), (0, 0, HOUR, 1, 1000, "BE"), length=2 * HOUR)
    setup = set_up(w, POLICIES["a"], Fleet(1, 1), teams=1)
    r = simulate(w, setup)
    assert sorted(r.waits) == [0.0, HOUR]  # one after the other on the one GPU
    assert r.alloc_milli == pytest.approx(0.75)  # (500 + 1000) milli-hours over 2 GPU-hours
    assert r.alloc_slices == pytest.approx(1.0)  # whole GPUs: the half ask holds all of one


def test_reclaim_preempts_and_the_run_so_far_is_redone():
    # team 0 borrows team 1's GPU; team 1's own pod arrives after half an hour and reclaims it
    w = window(
        (0, 0, HOUR, 1, 1000, "BE"),
        (0, 0, HOUR, 1, 1000, "BE"),
        (1, 0.5 * HOUR, HOUR, 1, 1000, "BE"),
        (1, 3 * HOUR, 60, 1, 1000, "BE"),  # gives team 1 a grant
    )
    setup = set_up(w, POLICIES["d"], Fleet(1, 2), teams=2)
    assert setup.grants == {(0, "b200-180gb"): 1, (1, "b200-180gb"): 1}
    r = simulate(w, setup)
    assert r.preemptions == 1
    assert r.lost_gpu_hours == pytest.approx(0.5)
    assert r.never_started == 0


def test_the_harness_delays_are_named_and_zero_by_default():
    assert all(v == 0 for v in vars(Harness()).values())
    w = window((0, 0, HOUR, 1, 1000, "BE"), (0, 0, HOUR, 1, 1000, "BE"))
    setup = set_up(w, POLICIES["a"], Fleet(1, 1), teams=1)
    late = simulate(w, setup, Harness(admission_latency_s=60, release_latency_s=60))
    assert sorted(late.waits) == [60.0, HOUR + 180.0]
    # Kueue's requeue batching and cycles (every 10 s): admitted at the first cycle (10), runs
    # from 70 to 3,670, released at 3,730, requeued at 4,330, admitted at the cycle at 4,340
    batched = simulate(w, setup, Harness(60, 60, requeue_delay_s=600, cycle_s=10))
    assert sorted(batched.waits) == [70.0, 4340.0 + 60]


def test_fair_shares_water_fill():
    assert rows.fair_shares({0: 1.0, 1: 10.0, 2: 10.0}, 9.0) == {0: 1.0, 1: 4.0, 2: 4.0}


def test_the_search_finds_the_smallest_carrying_fleet():
    # two one-GPU pods at once: one node of one GPU makes one wait an hour, two carry
    w = window((0, 0, HOUR, 1, 1000, "BE"), (0, 0, HOUR, 1, 1000, "BE"))
    nodes, result, probes, _ = rows.carrying_fleet(
        w, POLICIES["a"], Fleet(1, 1), 1, Harness(), 0, 1
    )
    assert nodes == 2 and result is not None and result.wait(0.95) == 0
    assert probes == [(1, False), (2, True)]
    zero = rows.row_zero(w, facts.get_model("B200-180GB"))
    assert zero.gpus == 2 and math.isclose(zero.alloc_milli, 0.25)


def test_the_search_does_not_assume_a_larger_fleet_carries_more():
    # carries at 5 and from 8 up, not at 6 or 7: bisection from 4 alone stops at 8
    carries = {5} | set(range(8, 100))
    asked: list[int] = []

    def ok(n: int) -> bool:
        asked.append(n)
        return n in carries

    assert rows.smallest_carrying(ok, start=4, limit=64, floor=2) == rows.Search(5, True)
    assert asked == [4, 8, 6, 7, 2, 3, 5]  # each size once; the scan stops at the first ✓
    asked.clear()
    assert rows.smallest_carrying(ok, start=4, limit=64, floor=6) == rows.Search(8, True)
    assert asked == [4, 8, 6, 7]  # never below the floor: nothing new to try
    asked.clear()
    assert rows.smallest_carrying(ok, start=4, limit=64, floor=1, budget=2) == rows.Search(
        8, False
    )  # 1 and 2 tried, then the budget is spent: not exhaustive, and said so
    assert asked == [4, 8, 6, 7, 1, 2]
    assert rows.smallest_carrying(lambda n: False, start=4, limit=16).nodes is None


TRACE = trace.DEFAULT_TRACE_DIR / trace.POD_FILE


@pytest.mark.skipif(not TRACE.exists(), reason="the trace is not on this machine")
def test_a_slice_of_the_real_trace_is_deterministic():
    # (how fast the simulator runs is make replay's to measure, against its baseline)
    pods = trace.read_pods(TRACE)
    w = select_window(pods, length=2 * 3600, teams=4, seed=0)
    results = [simulate(w, set_up(w, POLICIES["e"], Fleet(2), 4)) for _ in range(2)]
    assert results[0].waits == results[1].waits
    assert results[0].alloc_milli == results[1].alloc_milli > 0


def test_mig_rows_run_on_the_planners_layouts():
    # fractional asks: 3 × 0.4 GPU (3g) and 2 × 0.1 GPU (1g) on one node of 2 GPUs
    w = window(
        *[(0, 0, HOUR, 1, 400, "LS") for _ in range(3)],
        *[(0, 0, HOUR, 1, 100, "BE") for _ in range(2)],
    )
    setup = set_up(w, POLICIES["b"], Fleet(1, 2), teams=1)
    shapes = setup.node_shapes[0]
    assert all(s.mode == "mig" for s in shapes)
    assert setup.supply.get("b200-180gb-mig-3g.90gb", 0) >= 3
    engine = build(setup, w, Harness())
    node = engine.scheduler.nodes[0]
    assert node.allocatable["nvidia.com/mig-3g.90gb"] == setup.supply["b200-180gb-mig-3g.90gb"]
    r = simulate(w, setup)
    assert r.refused == 0 and r.never_started == 0 and max(r.waits) == 0


def test_slice_grants_admit_a_4g_ask_against_idle_whole_gpu_quota():
    # row f's what-if: a team granted 7 slices, held as one idle whole GPU's worth, asks a 4g
    model = facts.get_model("B200-180GB")
    four_g = next(p for p in model.profiles.values() if p.compute_slices == 4)
    transformations = slice_quota.transformations(model)
    assert transformations[facts.WHOLE_GPU_RESOURCE] == {slice_quota.SLICES: model.compute_slices}
    flavor = model.key.lower()

    def queue(quotas: dict) -> kq.Kueue:
        flavors = {r: [flavor] for _, r in quotas}
        return kq.Kueue(
            [kq.ClusterQueue("t", None, "BestEffortFIFO", quotas, flavors, "Never", "Never")]
        )

    resource, units = kq.transform(four_g.resource_name, 1, transformations)
    assert (resource, units) == (slice_quota.SLICES, 4)
    slices = queue({(flavor, slice_quota.SLICES): kq.Quota(model.compute_slices, 0, None)})
    ask = kq.Workload("p", "t", resource, units, 0, 0.0)
    assert slices.can_ever_fit(slices.queues["t"], resource, units)
    assert slices.assign(ask) == flavor  # 4 of the 7 idle slices
    # the per-class model: the same grant as one whole GPU, and no 4g line: refused
    per_class = queue({(flavor, facts.WHOLE_GPU_RESOURCE): kq.Quota(1, 0, None)})
    ask = kq.Workload("p", "t", four_g.resource_name, 1, 0, 0.0)
    assert not per_class.can_ever_fit(per_class.queues["t"], four_g.resource_name, 1)
    assert per_class.assign(ask) is None


def test_the_search_gives_up_a_size_once_its_wait_is_sure_to_fail():
    # three one-hour pods at once on one GPU: waits 0, 1 h, 2 h; p95 is 2 h > 30 min
    w = window(*[(0, 0, HOUR, 1, 1000, "BE") for _ in range(3)])
    setup = set_up(w, POLICIES["a"], Fleet(1, 1), teams=1)
    full = simulate(w, setup)
    partial = simulate(w, setup, give_up=(rows.WAIT_LIMIT_S, rows.WAIT_QUANTILE))
    assert rows.shortfalls(full) and rows.shortfalls(partial)
    assert partial.never_started > full.never_started == 0  # stopped before the last ran
    roomy = set_up(w, POLICIES["a"], Fleet(3, 1), teams=1)  # carries: never given up
    kept = simulate(w, roomy, give_up=(rows.WAIT_LIMIT_S, rows.WAIT_QUANTILE))
    assert kept.waits == simulate(w, roomy).waits == [0.0, 0.0, 0.0]


def test_slice_grants_count_asks_for_classes_the_layouts_lack():
    # a 2g-sized ask while the fleet has only whole GPUs: its slices still count in the split
    model = facts.get_model("B200-180GB")
    w = window((0, 0, HOUR, 1, 250, "BE"), (1, 0, HOUR, 1, 1000, "BE"))
    whole = {facts.class_slug(model, "whole"): 2}
    grants = slice_quota.grants(w, rows.WHAT_IF["f"], model, whole)
    assert sum(grants.values()) == 2 * model.compute_slices and grants[0] >= 2
