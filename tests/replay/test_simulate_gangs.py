"""Gangs in the trace-time simulator (pure): which trace pods stand for a multi-node job (the
stated assumption), the window that holds most of them, placing every pod of a job at once, and
what whole admission changes beside starting workers one by one."""

import math

from replay.simulate import gangs
from replay.workload import ReplayPod


def pod(name, arrival, run, gpus, team=0, milli=1000):
    return ReplayPod(name, team, arrival, run, gpus, milli, "LS")


def test_each_node_sized_pod_stands_for_a_gang_of_that_many_workers_the_rest_run_alone():
    pods = [
        pod("a", 0, 100, 8),
        pod("b", 30, 100, 4),
        pod("c", 31, 100, 1, milli=300),  # a shared GPU: its share
    ]
    jobs = gangs.form_gangs(pods, gpus_per_node=8)
    assert [([p.name for p in j.pods], j.gpus) for j in jobs] == [
        (["a", "a"], [8000, 8000]),
        (["b"], [4000]),
        (["c"], [300]),
    ]
    assert [j.size for j in gangs.form_gangs(pods, gpus_per_node=8, size=1)] == [1, 1, 1]
    assert [j.size for j in gangs.form_gangs(pods, gpus_per_node=8, size=4)] == [4, 1, 1]


def test_the_window_with_the_most_node_sized_arrivals():
    assert gangs.busiest_end([10, 500, 520, 530, 5000], 100) == 531
    assert gangs.busiest_end([10, 5000], 100) == 5001  # a tie: the latest
    assert gangs.busiest_end([], 100) is None


def test_every_pod_of_a_job_is_placed_at_once_best_fit_or_none_is():
    assert gangs.fit([8, 3, 8], [8, 2]) == [0, 1]  # any unit: milli-GPUs in the simulator
    assert gangs.fit([8, 3, 7], [8, 8]) is None
    assert gangs.fit([1, 8], [1]) == [0]


def scenario():
    return [
        gangs.GangJob([pod("solo", 0, 100, 8)], 0, 100, [8000]),
        gangs.GangJob([pod("g0", 1, 50, 8), pod("g1", 1, 50, 8)], 1, 50, [8000, 8000]),
        gangs.GangJob([pod("small", 2, 10, 4)], 2, 10, [4000]),
    ]


def test_whole_admission_lets_what_fits_go_first_and_holds_nothing_idle():
    result = gangs.simulate(scenario(), nodes=2, gpus_per_node=8, horizon=1000, mode="whole")
    # the gang needs both nodes: it starts whole when the solo pod leaves at 100; the small
    # pod fits the free node at once
    assert result.waits == [0, 99, 0]
    assert result.gang_waits == [99]
    assert result.held_idle_gpu_hours == 0
    assert result.alloc == (8 * 100 + 16 * 50 + 4 * 10) / (16 * 1000)
    assert (result.jobs, result.gangs, result.gang_pods) == (3, 1, 2)


def test_started_one_by_one_a_gang_holds_a_node_idle_and_blocks_what_would_fit():
    result = gangs.simulate(scenario(), nodes=2, gpus_per_node=8, horizon=1000, mode="split")
    # g0 takes the free node at 1 and waits idle for g1 until 100; the small pod then waits
    # for the gang to end at 150
    assert result.waits == [0, 99, 148]
    assert result.held_idle_gpu_hours == 8 * 99 / 3600
    assert result.wait(0.5) == 99


def test_a_gang_that_never_gets_all_its_pods_waits_for_ever_and_its_started_worker_counts():
    jobs = [
        gangs.GangJob([pod("solo", 0, 10_000, 8)], 0, 10_000, [8000]),
        gangs.GangJob([pod("g0", 1, 5, 8), pod("g1", 1, 5, 8)], 1, 5, [8000, 8000]),
    ]
    split = gangs.simulate(jobs, nodes=2, gpus_per_node=8, horizon=101, mode="split")
    assert math.isinf(split.waits[1])
    assert split.held_idle_gpu_hours == 8 * 100 / 3600
    whole = gangs.simulate(jobs, nodes=2, gpus_per_node=8, horizon=101, mode="whole")
    assert math.isinf(whole.waits[1]) and whole.held_idle_gpu_hours == 0
    said = gangs.table([whole, split], nodes=2, gpus_per_node=8, size=2)
    assert "assumed: each 8-GPU trace pod is one worker of a 2-node job" in said
    assert "| split | 2 (1, 2) | 50.0% | 0 / never | never | 1 | 0.2 |" in said
