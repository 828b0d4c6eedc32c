"""Layouts that follow the queue: the pure decision (scheduler.mig.elastic)."""

from catalog import facts
from scheduler.mig import elastic
from scheduler.mig import planner as pl

A100 = facts.get_model("A100-80GB")
MIG_1G = facts.class_slug(A100, "mig", "1g.10gb")
MIG_3G = facts.class_slug(A100, "mig", "3g.40gb")
ALL_1G = pl.Shape.mig({"1g.10gb": 7})
POLICY = elastic.ElasticPolicy(min_wait_s=600, max_gpus_per_hour=2)


def gpu(index, shape=ALL_1G, busy=(), node="node-a"):
    return pl.GpuState(node, index, A100.key, shape, busy=busy, pods=("ns/p",) if busy else ())


def test_a_backlog_of_3g_on_1g_layouts_reshapes_idle_gpus_only():
    gpus = [gpu(0, busy=((MIG_1G, 1),)), gpu(1), gpu(2)]
    waiting = [elastic.WaitingAsk(MIG_3G, 1, 900), elastic.WaitingAsk(MIG_3G, 1, 1200)]
    d = elastic.decide(gpus, waiting, POLICY)
    assert d.changes, d.skipped
    assert {c.index for c in d.changes} <= {1, 2}  # GPU 0 runs a pod: never touched
    after = pl.supply(gpus, {(c.node, c.index): c.after for c in d.changes})
    assert after[MIG_3G] >= 2
    assert "2 × 3g.40gb" in d.reason(A100) and "node-a GPU" in d.reason(A100)


def test_young_waiting_moves_nothing():
    d = elastic.decide([gpu(0), gpu(1)], [elastic.WaitingAsk(MIG_3G, 1, 599)], POLICY)
    assert d.changes == []
    assert "10 min" in d.skipped


def test_waiting_the_layout_can_serve_moves_nothing():
    three = pl.Shape.mig({"3g.40gb": 2})
    d = elastic.decide([gpu(0, three)], [elastic.WaitingAsk(MIG_3G, 1, 3600)], POLICY)
    assert d.changes == [] and "lacks" in d.skipped


def test_the_disruption_budget_caps_and_then_stops_changes():
    gpus = [gpu(i) for i in range(6)]
    waiting = [elastic.WaitingAsk(MIG_3G, 1, 3600) for _ in range(10)]
    assert len(elastic.decide(gpus, waiting, POLICY).changes) == 2
    assert len(elastic.decide(gpus, waiting, POLICY, changed_last_hour=1).changes) == 1
    spent = elastic.decide(gpus, waiting, POLICY, changed_last_hour=2)
    assert spent.changes == [] and "2 of 2 GPUs" in spent.skipped


def test_paused_pools_never_change():
    p = elastic.ElasticPolicy(paused=True)
    d = elastic.decide([gpu(0)], [elastic.WaitingAsk(MIG_3G, 1, 3600)], p)
    assert d.changes == [] and "paused" in d.skipped


def test_busy_gpus_are_never_reshaped_even_when_nothing_else_can_serve():
    gpus = [gpu(i, busy=((MIG_1G, 1),)) for i in range(3)]
    d = elastic.decide(gpus, [elastic.WaitingAsk(MIG_3G, 1, 3600)], POLICY)
    assert d.changes == [] and "idle GPU" in d.skipped


def test_policy_problems_name_what_to_change():
    assert elastic.ElasticPolicy(min_wait_s=-1).problems() == {
        "min_wait_s": "must be 0 or more seconds"
    }
    assert "max_gpus_per_hour" in elastic.ElasticPolicy(max_gpus_per_hour=0).problems()
    assert elastic.ElasticPolicy(max_gpus_per_hour=0, paused=True).problems() == {}
    assert elastic.ElasticPolicy().problems() == {}


def test_plan_greedy_honours_max_changed():
    gpus = [gpu(i) for i in range(5)]
    result = pl.plan_greedy(gpus, {MIG_3G: 10}, pl.Policy(max_changed=3))
    assert len(result.changed) == 3
    assert len(pl.plan_greedy(gpus, {MIG_3G: 10}).changed) == 5


def test_only_the_nodes_named_may_change():
    gpus = [gpu(0, node="node-a"), gpu(0, node="node-b")]
    waiting = [elastic.WaitingAsk(MIG_3G, 1, 3600)]
    d = elastic.decide(gpus, waiting, POLICY, nodes=frozenset({"node-b"}))
    assert [c.node for c in d.changes] == ["node-b"]


WHOLE = facts.class_slug(A100, "whole")


def test_an_ask_of_several_gpus_gets_them_on_one_node():
    # Two whole GPUs free, on two nodes: a 2-GPU pod fits neither. The node with the idle MIG
    # GPU beside its free whole one is made whole; nothing else moves.
    gpus = [
        gpu(0, pl.WHOLE, node="node-a"),
        gpu(1, busy=((MIG_1G, 1),), node="node-a"),
        gpu(0, pl.WHOLE, node="node-b"),
        gpu(1, node="node-b"),
    ]
    p = elastic.ElasticPolicy(min_wait_s=600, max_gpus_per_hour=4)
    d = elastic.decide(gpus, [elastic.WaitingAsk(WHOLE, 2, 900)], p)
    assert [(c.node, c.index, c.after) for c in d.changes] == [("node-b", 1, pl.WHOLE)]


def test_an_ask_a_node_can_take_as_it_is_moves_nothing():
    gpus = [gpu(0, pl.WHOLE), gpu(1, pl.WHOLE), gpu(2)]
    p = elastic.ElasticPolicy(min_wait_s=0, max_gpus_per_hour=4)
    d = elastic.decide(gpus, [elastic.WaitingAsk(WHOLE, 2, 900)], p)
    assert d.changes == []
