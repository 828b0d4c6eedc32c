"""Rows f…j on small hand-made windows: slice quotas read from the portal's catalog, the rows'
ClusterQueues, the grace end to end, the priority mapping, time-slicing sized to demand and
the fairness metric."""

from __future__ import annotations

from dataclasses import replace

import pytest

from catalog import facts, slices
from replay.simulate import fleet, goals, rows, slice_quota
from replay.simulate import kueue as kq
from replay.simulate.engine import Harness, Result
from replay.simulate.fleet import Fleet, set_up, simulate
from replay.workload import POLICIES, ReplayPod, Window, priority_of

HOUR = 3600.0
B200 = facts.get_model("B200-180GB")


def window(*pods: tuple[int, float, float, int, int, str], length: float = 4 * HOUR) -> Window:
    """(team, arrival, run, num_gpu, gpu_milli, qos) per pod."""
    made = [
        ReplayPod(f"p{n}", team, arrival, run, gpus, milli, qos)
        for n, (team, arrival, run, gpus, milli, qos) in enumerate(pods)
    ]
    return Window(0, int(length), made, 0, 0)


def result(held: dict[int, float], demand: dict[int, float], gpus: int) -> Result:
    return Result(
        horizon=HOUR, fleet_gpus=gpus, jobs=0, refused=0, never_started=0, preemptions=0,
        alloc_milli=0.0, alloc_slices=0.0, waits=[], lost_gpu_hours=0.0, team_held=held,
        team_demand=demand, finished_at=0.0,
    )  # fmt: skip


def test_slice_counts_and_transformations_are_the_portals():
    whole, shared = facts.class_slug(B200, "whole"), facts.class_slug(B200, "shared")
    four_g = next(p for p in B200.profiles.values() if p.compute_slices == 4)
    mig = facts.class_slug(B200, "mig", four_g.name)
    assert slice_quota.unit_slices(whole, B200) == slices.SLICES_PER_GPU
    assert slice_quota.unit_slices(shared, B200) == slices.shared_replica_slices() == 2
    assert slice_quota.unit_slices(mig, B200) == 4
    t = slice_quota.transformations(B200)  # every resource the model may advertise
    assert t[facts.WHOLE_GPU_RESOURCE] == {slices.SLICE_RESOURCE: 7}
    assert t[facts.SHARED_GPU_RESOURCE] == {slices.SLICE_RESOURCE: 2}
    assert t[f"nvidia.com/mig-{four_g.name}"] == {slices.SLICE_RESOURCE: 4}
    assert len(t) == 2 + len(B200.profiles)


def test_the_rows_queues_drop_the_borrowing_limit_and_carry_a_weight():
    w = window((0, 0, HOUR, 1, 1000, "BE"), (1, 0, HOUR, 1, 500, "LS"))
    for key, unlimited in (("f", False), ("g", True)):
        setup = set_up(w, rows.ROWS[key], Fleet(1, 2), teams=2)
        queues = [kq.cluster_queue(m) for m in setup.cluster_queues]
        lines = [q.quotas[(B200.key.lower(), slices.SLICE_RESOURCE)] for q in queues]
        assert sum(x.nominal for x in lines) == 2 * slices.SLICES_PER_GPU
        assert all((x.borrowing_limit is None) == unlimited for x in lines)
        # the portal renders every team's weight; Kueue reads it only with fair sharing on
        weights = [m["spec"].get("fairSharing") for m in setup.cluster_queues]
        assert weights == [{"weight": "1"}] * 2


@pytest.mark.parametrize("key", ["a", "d", "g"])
def test_as_the_cluster_runs_it_each_rows_class_grants_fold_into_one_line_of_slices(key):
    # calibration simulates each row as part 1's cluster ran it: the portal's default unit
    w = window((0, 0, HOUR, 1, 1000, "BE"), (1, 0, HOUR, 2, 1000, "LS"))
    policy = rows.ROWS[key]
    per_class = set_up(w, replace(policy, slices=False, unlimited_borrowing=False), Fleet(1, 4), 2)
    setup = set_up(w, policy, Fleet(1, 4), teams=2, as_cluster=True)
    assert setup.grants == per_class.grants  # the grants every row makes, per class
    assert setup.transformations == slice_quota.transformations(B200)
    for team, manifest in enumerate(setup.cluster_queues):
        quotas = kq.cluster_queue(manifest).quotas
        assert not [r for _, r in quotas if r.startswith("nvidia.com/")]  # no per-class line
        line = quotas[(B200.key.lower(), slices.SLICE_RESOURCE)]  # one line: the model's slices
        granted = sum(
            n * slice_quota.unit_slices(slug, B200)
            for (t, slug), n in setup.grants.items()
            if t == team
        )
        assert line.nominal == granted
        if policy.unlimited_borrowing:
            assert line.borrowing_limit is None
        elif policy.borrowing:
            assert line.borrowing_limit == 4 * slices.SLICES_PER_GPU
        else:
            assert line.borrowing_limit == 0


def test_the_cluster_replay_sets_what_each_row_names():
    from replay.overtime import borrowing_limit, grace_wall_s

    assert set(rows.CLUSTER_ROWS) == set("abcdeghi")
    assert [borrowing_limit(rows.ROWS[k], 16) for k in "adg"] == [0, 16, None]
    # a…g: Kueue's own immediate reclaim (grace 0), not the product's 10-minute default
    assert [grace_wall_s(rows.ROWS[k], 60.0) for k in "aeg"] == [0, 0, 0]
    assert grace_wall_s(rows.ROWS["h"], 60.0) == 10  # 10 trace minutes at 60×
    assert grace_wall_s(rows.ROWS["h"], 1440.0) == 1  # never rounded down to "at once"


def test_reclaim_waits_out_the_grace_and_loses_that_run():
    # team 0 borrows team 1's GPU at 0; team 1's own pod arrives at 60 s: with a 10 min grace
    # it reclaims at 600, team 0's borrowed run so far (600 s of one GPU) is lost
    w = window(
        (0, 0, HOUR, 1, 1000, "BE"),
        (0, 0, HOUR, 1, 1000, "BE"),
        (1, 60, HOUR, 1, 1000, "BE"),
        (1, 3 * HOUR, 60, 1, 1000, "BE"),  # gives team 1 a grant
    )
    for grace, start in ((0.0, 60.0), (600.0, 600.0)):
        policy = replace(POLICIES["d"], grace_s=grace)
        setup = set_up(w, policy, Fleet(1, 2), teams=2)
        engine = fleet.build(setup, w, Harness())
        engine.run(w.length + fleet.DRAIN_LIMIT_S)
        claim = next(j for j in engine.jobs if j.pod.name == "p2")
        assert claim.started == start
        lost = sum(j.lost_gpu_s for j in engine.jobs)
        assert lost == pytest.approx(start)  # the borrower ran from 0 until reclaimed


def test_the_minority_priority_rule_makes_only_shared_latency_sensitive_asks_high():
    pod = ReplayPod("p", 0, 0, 60, 1, 1000, "LS")
    shared = replace(pod, gpu_milli=200)
    assert priority_of(pod, POLICIES["e"]) == priority_of(shared, POLICIES["e"]) == "gpu-high"
    i = rows.ROWS["i"]
    assert priority_of(pod, i) == "gpu-low" and priority_of(shared, i) == "gpu-high"
    assert priority_of(replace(shared, qos="BE"), i) == "gpu-low"
    assert priority_of(replace(pod, qos="Guaranteed"), i) == "gpu-high"
    assert priority_of(shared, rows.ROWS["h"]) == "gpu-low"  # h has no priority


def test_time_slicing_sized_to_demand_takes_gpus_not_a_node():
    # one small shared ask among whole-GPU work on 2 nodes of 4: c time-slices a whole node,
    # j one GPU
    w = window((0, 0, HOUR, 1, 200, "LS"), *[(0, 0, HOUR, 1, 1000, "BE") for _ in range(4)])
    per_node = set_up(w, POLICIES["c"], Fleet(2, 4), teams=1)
    sized = set_up(w, rows.ROWS["j"], Fleet(2, 4), teams=1)
    shared = facts.class_slug(B200, "shared")
    assert per_node.supply[shared] == 4 * facts.SHARED_REPLICAS
    assert sized.supply[shared] == facts.SHARED_REPLICAS
    assert [s.mode for s in sized.node_shapes[1]][-1] == "shared"
    assert sum(s.mode == "shared" for n in sized.node_shapes for s in n) == 1
    r = simulate(w, sized)
    assert r.refused == r.never_started == 0 and max(r.waits) == 0


def test_fairness_is_held_over_min_of_demand_and_the_max_min_share():
    # 9 GPUs over demands 1, 10, 10: fair shares 1, 4, 4
    r = result({0: 1.0, 1: 6.0, 2: 3.0}, {0: 1.0, 1: 10.0, 2: 10.0}, gpus=9)
    assert rows.fairness(r) == pytest.approx({0: 1.0, 1: 1.5, 2: 0.75})
    assert rows.shortfalls(r) == ["team 3 3.0 < 3.6 GPUs"]  # 0.9 × 4
    roomy = result({0: 1.0, 1: 9.0}, {0: 1.0, 1: 10.0}, gpus=40)  # fair share = demand
    assert rows.fairness(roomy) == pytest.approx({0: 1.0, 1: 0.9})
    assert not rows.shortfalls(roomy)


def test_the_goals_are_read_at_the_carrying_fleet():
    zero = rows.RowZero(gpus=100, per_team={}, alloc_milli=0.5, alloc_slices=0.5)
    carried = result({0: 4.0}, {0: 4.0}, gpus=64)
    carried.alloc_milli = 0.81
    row = rows.Row(rows.ROWS["g"], carried, setup=None, carrying_nodes=8, carrying=carried)  # type: ignore[arg-type]
    assert goals.verdicts(row, zero, Fleet(8)) == (True, True, True)  # 64 ≤ 65 GPUs
    row.carrying_nodes = 9
    assert goals.verdicts(row, zero, Fleet(9)) == (True, False, True)
    assert goals.verdicts(rows.Row(rows.ROWS["g"], carried, setup=None), zero, Fleet(8)) is None  # type: ignore[arg-type]
