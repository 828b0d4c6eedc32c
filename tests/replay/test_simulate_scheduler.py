"""The scheduler model: what nodes advertise, MostAllocated, whole GPUs on one node."""

from __future__ import annotations

from catalog import facts
from localcluster.components import scheduler_config
from replay.simulate.scheduler import Pod, Scheduler, gpu_node, resource_name, scoring_weights
from scheduler.mig.planner import WHOLE, Shape

MODEL = facts.get_model("B200-180GB")
GPU = facts.WHOLE_GPU_RESOURCE


def pod(name: str, units: int = 1, resource: str = GPU, priority: int = 0) -> Pod:
    return Pod(name, resource, units, priority, 0.0)


def test_nodes_advertise_their_layouts():
    mig = gpu_node("m", MODEL, [Shape.mig({"3g.90gb": 2}), Shape.mig({"4g.90gb": 1, "1g.23gb": 3})])
    assert mig.allocatable == {
        "nvidia.com/mig-3g.90gb": 2,
        "nvidia.com/mig-4g.90gb": 1,
        "nvidia.com/mig-1g.23gb": 3,
    }
    shared = gpu_node("s", MODEL, [Shape("shared", (), facts.SHARED_REPLICAS)] * 8)
    assert shared.allocatable == {facts.SHARED_GPU_RESOURCE: 32}  # replicas per node
    assert (
        resource_name(MODEL, facts.class_slug(MODEL, "mig", "2g.45gb")) == "nvidia.com/mig-2g.45gb"
    )


def test_a_mig_ask_takes_only_its_own_profile():
    s = Scheduler([gpu_node("m", MODEL, [Shape.mig({"3g.90gb": 2})])], {GPU: 1})
    assert not s.submit(pod("small", resource="nvidia.com/mig-1g.23gb"))
    assert s.submit(pod("three", resource="nvidia.com/mig-3g.90gb"))


def test_most_allocated_packs_onto_the_fuller_node():
    weights = scoring_weights(scheduler_config())  # the local cluster's own configuration
    assert weights[GPU] > weights["cpu"]
    a, b = gpu_node("a", MODEL, [WHOLE] * 8), gpu_node("b", MODEL, [WHOLE] * 8)
    s = Scheduler([a, b], weights)
    s.submit(pod("first", 3))
    full = a if a.used[GPU] else b
    s.submit(pod("second", 2))
    assert full.used[GPU] == 5


def test_several_whole_gpus_need_one_node_and_wait_for_it():
    a, b = gpu_node("a", MODEL, [WHOLE] * 4), gpu_node("b", MODEL, [WHOLE] * 4)
    s = Scheduler([a, b], {GPU: 1})
    first, second = pod("first", 3), pod("second", 3)
    assert s.submit(first) and s.submit(second)
    assert (a.free(GPU), b.free(GPU)) == (1, 1)
    big = pod("big", 2)
    assert not s.submit(big)  # 2 free GPUs, one on each node
    s.remove(first)
    assert s.retry() == [big] and big.node is first_node(a, b)


def first_node(a, b):
    return a if a.used[GPU] == 2 else b
