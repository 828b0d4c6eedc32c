"""Static MIG packing over small synthetic traces: the draw, the three methods, the table."""

from __future__ import annotations

from collections import Counter

import pytest

from catalog import facts
from replay.packed import SHARED
from replay.packing import (
    METHODS,
    MIG_METHODS,
    WHOLE_ASK,
    Ask,
    DrawnPod,
    PackingResult,
    ask_of,
    draw_pods,
    mig_model,
    pack_online_first_fit,
    pack_with_plan,
    run_packing,
)
from replay.packing_table import packing_table
from replay.published import PUBLISHED
from replay.trace import TraceNode, TracePod
from scheduler.mig.planner import plan_exact

A100 = mig_model("A100-80GB")
SLICES = {p.name: p.compute_slices for p in A100.profiles.values()} | {WHOLE_ASK: 7}


def pod(
    name: str,
    gpu_milli: int,
    num_gpu: int = 1,
    cpu: int = 1000,
    memory: int = 1024,
    gpu_spec: str = "",
) -> TracePod:
    return TracePod(
        name=name,
        line=0,
        cpu_milli=cpu,
        memory_mib=memory,
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        gpu_spec=gpu_spec,
        qos="LS",
        phase="Running",
        creation=0,
        deletion=None,
        scheduled=None,
    )


def node(
    name: str, gpus: int, cpu: int = 1_000_000, memory: int = 1_000_000, model: str = "G2"
) -> TraceNode:
    return TraceNode(name=name, line=0, cpu_milli=cpu, memory_mib=memory, gpus=gpus, model=model)


# A little of every ask the real trace has: whole, rounding up to whole, every profile, multi-GPU.
MIXED_PODS = [
    pod("whole", 1000),
    pod("810", 810),
    pod("4g", 460),
    pod("3g", 320),
    pod("2g", 230),
    pod("1g", 110),
    pod("two", 1000, num_gpu=2),
    pod("four", 1000, num_gpu=4),
    pod("eight", 1000, num_gpu=8),
    pod("cpu-only", 0, num_gpu=0),
]
MIXED_NODES = [node("n8a", 8), node("n4", 4), node("n2", 2), node("n8b", 8), node("n1", 1)]


def drawn_in_order(*pods: TracePod) -> list[DrawnPod]:
    return [DrawnPod(i, p, ask_of(p, A100)) for i, p in enumerate(pods)]


def drawn_of(result: PackingResult, gpu) -> list[DrawnPod]:
    """The drawn pods a GPU of a result holds."""
    return [result.pods[position] for position, _ in gpu.pods]


@pytest.fixture(scope="module")
def mixed_results() -> list[PackingResult]:
    return run_packing(MIXED_PODS, MIXED_NODES, seeds=range(3), progress=None)


def test_asks_follow_replay_md_mapping():
    assert ask_of(pod("a", 110), A100) == Ask("1g.10gb")
    assert ask_of(pod("a", 230), A100) == Ask("2g.20gb")
    assert ask_of(pod("a", 320), A100) == Ask("3g.40gb")
    assert ask_of(pod("a", 460), A100) == Ask("4g.40gb")
    assert ask_of(pod("a", 810), A100) == Ask(WHOLE_ASK, 1)  # 7g: the whole GPU
    assert ask_of(pod("a", 1000, num_gpu=8), A100) == Ask(WHOLE_ASK, 8)


def test_draw_is_the_simulators_tuned_workload():
    # The list asks 16.93 GPUs: all of it, CPU-only pods too, then draws up to 1.3 · 23 GPUs.
    drawn = draw_pods(MIXED_PODS, gpus=23, rho=1.3, seed=7, model=A100)
    totals = [d.pod.gpu_request_milli for d in drawn]
    assert {d.pod.name for d in drawn} == {p.name for p in MIXED_PODS}
    assert len(drawn) > len(MIXED_PODS)
    assert sum(totals) <= 1.3 * 1000 * 23
    assert [d.position for d in drawn] == list(range(len(drawn)))
    # ρ = 1.0 is the first part of the same workload, as the published column 100 is.
    first = draw_pods(MIXED_PODS, gpus=23, rho=1.0, seed=7, model=A100)
    assert [d.pod for d in first] == [d.pod for d in drawn[: len(first)]]
    asked = sum(totals[: len(first)])
    assert asked <= 1000 * 23 < asked + totals[len(first)]


def test_draw_tunes_a_list_that_asks_too_much_down():
    drawn = draw_pods(MIXED_PODS, gpus=5, rho=1.3, seed=3, model=A100)
    names = [d.pod.name for d in drawn]
    assert len(names) == len(set(names)) and set(names) < {p.name for p in MIXED_PODS}
    assert sum(d.pod.gpu_request_milli for d in drawn) <= 1.3 * 1000 * 5


def test_same_seed_same_packing_other_seed_other_draw(mixed_results):
    again = run_packing(MIXED_PODS, MIXED_NODES, seeds=range(3), progress=None)
    assert [(r.method, r.seed, r.placements) for r in again] == [
        (r.method, r.seed, r.placements) for r in mixed_results
    ]
    draws = {r.seed: r.drawn for r in mixed_results}
    assert len(set(draws.values())) > 1 or len({r.requested_milli for r in mixed_results}) > 1


def test_every_method_and_seed_is_reported(mixed_results):
    assert sorted((r.method, r.seed) for r in mixed_results) == sorted(
        (m, s) for m in METHODS for s in range(3)
    )
    for r in mixed_results:
        assert r.gpus == 23 and r.nodes == 5
        assert 16_930 <= r.requested_milli <= 1.3 * 1000 * 23  # the list asks 16.93 GPUs
        assert r.placed + r.failed == r.drawn
        assert 0 < r.a_req <= r.a_slice <= 1  # rounding to profiles only ever adds slices
        assert r.unallocated_gpus == pytest.approx((1 - r.a_req) * 23)


def test_pods_placed_once_multi_gpu_on_one_node_and_capacity_kept(mixed_results):
    # Not vacuous: the draws put MIG instances and 8-GPU pods on the fleet.
    assert any(r.reconfigured_gpus for r in mixed_results)
    assert any(len(gids) == 8 for r in mixed_results for gids in r.placements.values())
    assert any(r.shared_gpus for r in mixed_results)
    for r in mixed_results:
        holders: dict[int, list[int]] = {}
        for gid, gpu in enumerate(r.fleet):
            for position, _ in gpu.pods:
                holders.setdefault(position, []).append(gid)
        # a pod is where the result says, nowhere else; CPU-only pods hold no GPU
        assert holders == {p: g for p, g in r.placements.items() if g}
        assert all(r.pods[p].pod.num_gpu for p in holders)
        gpus_per_pod = {p: len(g) for p, g in holders.items()}
        assert set(Counter(gpus_per_pod.values())) <= {1, 2, 4, 8}
        for gids in holders.values():
            assert len(gids) == len(set(gids))
            assert len({r.fleet[g].node for g in gids}) == 1, "a multi-GPU pod spans nodes"
        for gpu in r.fleet:
            used = gpu.used()
            if gpu.mode == "whole":
                assert len(gpu.pods) <= 1 and set(used) <= {WHOLE_ASK}
            elif gpu.mode == "shared":
                assert r.method not in MIG_METHODS
                assert set(used) == {SHARED} and len(gpu.replicas) == len(gpu.pods) >= 2
                milli = sorted(p.pod.gpu_milli for p in drawn_of(r, gpu))
                assert sorted(gpu.replicas) == milli and sum(milli) <= 1000
            else:
                assert WHOLE_ASK not in used
                assert all(used[p] <= gpu.layout[p] for p in used)
                assert sum(SLICES[p] * n for p, n in gpu.layout.items()) <= 7
                assert facts.can_pack(A100, gpu.layout)
        assert r.mig_gpus == sum(1 for g in r.fleet if g.mode == "mig")
        assert r.shared_gpus == sum(1 for g in r.fleet if g.mode == "shared")
        assert r.reconfigured_gpus == r.mig_gpus + r.shared_gpus
        assert r.idle_gpus == sum(1 for g in r.fleet if not g.pods)


def test_planner_places_more_than_online_first_fit():
    # Online, two 3g fill the first GPU and two 4g cannot share the second; offline, the
    # planner sees all four and makes both GPUs 4g + 3g.
    drawn = drawn_in_order(pod("a", 400), pod("b", 400), pod("c", 500), pod("d", 500))
    nodes = [node("n", 2)]
    _, online, _ = pack_online_first_fit(drawn, nodes, A100)
    fleet, planned, _ = pack_with_plan(drawn, nodes, A100, plan_exact)
    assert sorted(online) == [0, 1, 2]
    assert sorted(planned) == [0, 1, 2, 3]
    assert [dict(g.layout) for g in fleet] == [{"3g.40gb": 1, "4g.40gb": 1}] * 2


def test_multi_gpu_pod_waits_for_one_node_with_enough_gpus():
    # Four free GPUs in all, but never four on one node: the 4-GPU pod fails everywhere.
    drawn = drawn_in_order(pod("w", 1000), pod("four", 1000, num_gpu=4), pod("two", 1000, 2))
    nodes = [node("a", 3), node("b", 2)]
    for fleet, placements, _ in (
        pack_online_first_fit(drawn, nodes, A100),
        pack_with_plan(drawn, nodes, A100, plan_exact),
    ):
        assert 1 not in placements
        assert len(placements[2]) == 2 and len({fleet[g].node for g in placements[2]}) == 1


def test_node_cpu_and_memory_limit_placement():
    drawn = drawn_in_order(
        pod("a", 1000, cpu=6000), pod("b", 1000, cpu=6000), pod("c", 300, memory=2048)
    )
    nodes = [node("n1-small", 2, cpu=8000), node("n2-big", 1, cpu=64000, memory=1500)]
    fleet, online, _ = pack_online_first_fit(drawn, nodes, A100)
    # b finds no CPU left on the small node and goes to the big one; then c finds no memory on
    # the big node and shares the small node's second GPU as a MIG instance.
    assert online == {0: [0], 1: [2], 2: [1]}
    _, unlimited, _ = pack_online_first_fit(drawn, nodes, A100, node_limits=False)
    assert unlimited == {0: [0], 1: [1], 2: [2]}
    # The planner (blind to CPU) makes the first GPU MIG; the assignment still finds room.
    planned_fleet, planned, _ = pack_with_plan(drawn, nodes, A100, plan_exact)
    assert planned == {0: [1], 1: [2], 2: [0]}
    for packed_fleet, placements in ((fleet, online), (planned_fleet, planned)):
        for n in nodes:
            on_node = [
                drawn[p].pod for p, g in placements.items() if packed_fleet[g[0]].node == n.name
            ]
            assert sum(p.cpu_milli for p in on_node) <= n.cpu_milli
            assert sum(p.memory_mib for p in on_node) <= n.memory_mib


def test_table_shows_measured_and_published_rows(mixed_results):
    table = packing_table(mixed_results, "openb_pod_list_default")
    header, rule, *rows = table.split("\n")
    assert header.startswith("| method | A_req % | A_slice % | unallocated GPUs | failed pods (")
    for method in MIG_METHODS:
        assert any(row.startswith(f"| {method} (MIG, counterfactual fleet) |") for row in rows)
    for method in ("mixed", "online-best-fit"):
        assert any(
            row.startswith(f"| {method} (whole, MIG or shared, counterfactual") for row in rows
        )
    assert "| FGD (published, openb_pod_list_default, fractional GPUs) | 95.39 | – | 286 |" in table
    published = [r for r in rows if "(published" in r]
    assert len(published) == len(PUBLISHED["openb_pod_list_default"]) == 6
    assert "counterfactual fleet (the trace has no MIG GPUs)" in table
    assert "G2 → A100-80GB" in table
    assert "3 seeds" in table


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": "L40S-48GB"}, "not MIG-capable"),
        ({"model": "Z9000"}, "unknown GPU model 'Z9000'"),
        ({"methods": ("planner", "best")}, "unknown packing method best"),
        ({"rho": 0}, "expected a load above 0"),
    ],
)
def test_run_packing_refuses_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_packing(MIXED_PODS, MIXED_NODES, seeds=[0], progress=None, **kwargs)


def test_run_packing_refuses_a_trace_without_gpu_pods_or_gpus():
    with pytest.raises(ValueError, match="no GPU pods"):
        run_packing([pod("cpu", 0, num_gpu=0)], MIXED_NODES, seeds=[0], progress=None)
    with pytest.raises(ValueError, match="no GPUs"):
        run_packing(MIXED_PODS, [node("cpu", 0)], seeds=[0], progress=None)


def test_progress_names_each_seed_and_method():
    lines: list[str] = []
    run_packing(MIXED_PODS, MIXED_NODES, seeds=[4], methods=("greedy",), progress=lines.append)
    assert len(lines) == 1 and lines[0].startswith("packing seed 4 greedy: ")
