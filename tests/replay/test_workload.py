"""The over-time replay's pure parts: the window, the team split, each policy's ask, the grants
and the measurements."""

import pytest

from catalog import facts
from replay import metrics
from replay.trace import TracePod
from replay.workload import (
    POLICIES,
    ReplayPod,
    ask,
    fleet_demand,
    select_window,
    split_supply,
    team_weights,
    unit_gpus,
)

B200 = facts.get_model("B200-180GB")


def pod(name, creation, run, *, num_gpu=1, milli=1000, qos="LS", scheduled_after=0, deletion=True):
    scheduled = creation + scheduled_after
    return TracePod(
        name=name, line=2, cpu_milli=1000, memory_mib=1024, num_gpu=num_gpu, gpu_milli=milli,
        gpu_spec="", qos=qos, phase="Running", creation=creation,
        deletion=scheduled + run if deletion else None, scheduled=scheduled,
    )  # fmt: skip


def test_team_sizes_are_uneven_and_add_up():
    weights = team_weights(4)
    assert weights == sorted(weights, reverse=True) and weights[0] > 3 * weights[-1]
    assert sum(weights) == pytest.approx(1)


def test_the_window_takes_its_arrivals_and_what_still_runs_when_it_opens():
    pods = [
        pod("before-done", 0, 50),  # ended before the window
        pod("before-running", 50, 500),  # runs into it: arrives at 0 for what is left
        pod("inside", 150, 30, scheduled_after=20),  # waited 20 s in the trace: runs 30
        pod("after", 300, 10),
        pod("never-ran", 160, 10),
        pod("cpu-only", 170, 10, num_gpu=0, milli=0),
    ]
    pods[4] = TracePod(**{**pods[4].__dict__, "scheduled": None})
    w = select_window(pods, length=200, end=300, teams=2, seed=1)
    got = {p.name: (p.arrival, p.run) for p in w.pods}
    assert got == {"before-running": (0.0, 450.0), "inside": (50.0, 30.0)}
    assert (w.start, w.carried_in, w.skipped_unscheduled) == (100, 1, 1)


def test_the_team_split_is_the_same_for_a_seed_and_differs_between_seeds():
    pods = [pod(f"p{i}", i, 5) for i in range(200)]
    split = lambda seed: [p.team for p in select_window(pods, length=300, seed=seed).pods]  # noqa: E731
    assert split(3) == split(3)
    assert split(3) != split(4)
    counts = [split(3).count(t) for t in range(4)]
    assert counts == sorted(counts, reverse=True)  # uneven, largest first (200 draws)


def test_each_policy_asks_what_its_techniques_allow():
    small = ReplayPod("s", 0, 0, 10, 1, 200, "LS")  # a fifth of a GPU
    mid = ReplayPod("m", 0, 0, 10, 1, 460, "BE")  # ⌈7·0.46⌉ = 4 slices
    big = ReplayPod("b", 0, 0, 10, 1, 810, "BE")  # ⌈5.67⌉ = 6 → 7g: a whole GPU
    multi = ReplayPod("x", 0, 0, 10, 8, 1000, "LS")
    whole, shared = "b200-180gb", "b200-180gb-shared"
    a, b, c, e = (POLICIES[k] for k in "abce")
    assert [ask(p, a, B200).slug for p in (small, mid, big)] == [whole] * 3
    assert ask(small, b, B200).slug == "b200-180gb-mig-2g.45gb"
    assert ask(mid, b, B200) == ask(mid, c, B200)
    assert ask(mid, b, B200).slug == "b200-180gb-mig-4g.90gb"
    assert ask(big, b, B200).slug == whole
    assert ask(small, c, B200).slug == shared and ask(small, c, B200).slices_per_unit == 7 / 4
    assert (ask(multi, b, B200).units, ask(multi, b, B200).slug) == (8, whole)
    assert ask(small, b, B200).priority == "gpu-low"
    assert (ask(small, e, B200).priority, ask(mid, e, B200).priority) == ("gpu-high", "gpu-low")


def test_the_planner_is_asked_for_the_fleets_worth_of_each_class():
    demand = {(0, "b200-180gb"): 10.0, (1, "b200-180gb"): 6.0, (1, "b200-180gb-mig-1g.23gb"): 14.0}
    # 16 whole + 14 × 1/7 = 18 GPUs of demand, for 9 GPUs: half, rounded up
    assert fleet_demand(demand, B200, 9) == {"b200-180gb": 8, "b200-180gb-mig-1g.23gb": 7}
    assert unit_gpus("b200-180gb-shared", B200) == 0.25
    assert unit_gpus("b200-180gb-mig-3g.90gb", B200) == 3 / 7


def test_supply_is_split_by_demand_and_every_team_can_run_its_largest_ask():
    whole = "b200-180gb"
    demand = {(0, whole): 9.0, (1, whole): 3.0, (2, whole): 0.5, (2, "b200-180gb-shared"): 2.0}
    largest = {(0, whole): 1, (1, whole): 2, (2, whole): 8, (2, "b200-180gb-shared"): 1}
    grants = split_supply(demand, {whole: 16, "b200-180gb-shared": 32}, largest)
    assert sum(v for (_, s), v in grants.items() if s == whole) == 16  # all of it, no more
    assert grants[(2, whole)] == 8  # its 8-GPU pod can run, moved from the biggest share
    assert grants[(1, whole)] >= 2 and grants[(0, whole)] >= 1
    assert grants[(2, "b200-180gb-shared")] == 32
    # what cannot be moved stays short: nobody has a unit to spare
    short = split_supply(
        {(0, whole): 1.0, (1, whole): 1.0}, {whole: 2}, {(0, whole): 1, (1, whole): 2}
    )
    assert short == {(0, whole): 1, (1, whole): 1}


def test_allocation_waits_and_shares_are_measured_from_the_runs():
    jobs = [
        metrics.JobRecord("a", 0, 7.0, 1000, 0.0, [(0.0, 10.0)], finished=10.0),
        metrics.JobRecord("b", 1, 3.5, 400, 0.0, [(5.0, None)]),  # still running at the end
        metrics.JobRecord("c", 1, 7.0, 1000, 2.0),  # never started
        metrics.JobRecord("d", 0, 7.0, 1000, 1.0, [(2.0, 4.0), (6.0, 8.0)], preemptions=1),
    ]
    m = metrics.measure(
        jobs, horizon=10.0, compression=360.0, fleet_gpus=2, slices_per_gpu=7,
        granted_gpus={0: 1.0, 1: 1.0}, points=10,
    )  # fmt: skip
    # slice-seconds: 70 + 17.5 + 28 = 115.5 of 140
    assert m.alloc_slices == pytest.approx(115.5 / 140)
    assert m.alloc_milli == pytest.approx((10_000 + 2_000 + 4_000) / 20_000)
    assert (m.started, m.not_started, m.preemptions) == (3, 1, 1)
    assert m.wait_p50 == pytest.approx(360.0) and m.wait_p95 == pytest.approx(1800.0)
    assert m.finished_per_hour == pytest.approx(1.0)  # one in 3,600 trace seconds
    assert m.team_share == pytest.approx({0: 1.4, 1: 0.25})
    assert len(m.series) == 10 and m.series[0] == (pytest.approx(0.05), pytest.approx(0.5))


def test_percentiles_are_nearest_rank():
    assert metrics.percentile([], 50) is None
    assert metrics.percentile([3, 1, 2, 4], 50) == 2
    assert metrics.percentile(list(range(1, 101)), 95) == 95


def test_window_refuses_a_pod_list_without_times():
    untimed = TracePod(
        name="u", line=2, cpu_milli=1, memory_mib=1, num_gpu=1, gpu_milli=1000, gpu_spec="",
        qos="", phase="", creation=0, deletion=None, scheduled=None, timed=False,
    )  # fmt: skip
    with pytest.raises(ValueError, match="no creation_time"):
        select_window([untimed], length=3600)
