"""Sharing sized to demand (issue 29): non-MIG GPUs decide one by one, and a node's
device-plugin config lists the GPUs it shares (pure)."""

import re

import pytest

from localcluster import gpu_layout as gl
from scheduler.mig import configs as mig_configs
from scheduler.mig import planner as pl

L40S = "L40S-48GB"
SHARED, WHOLE_CLASS = "l40s-48gb-shared", "l40s-48gb"
X4 = pl.Shape("shared", (), 4)
SOLVERS = [pl.plan_exact, pl.plan_greedy]


def node(shapes, name="l", busy=None):
    busy = busy or {}
    return [
        pl.GpuState(
            name,
            i,
            L40S,
            s,
            ((SHARED if s.mode == "shared" else WHOLE_CLASS, busy[i]),) if i in busy else (),
            (f"t/p{i}",) if i in busy else (),
        )
        for i, s in enumerate(shapes)
    ]


def shapes_of(result, name="l"):
    return [s for (n, _), s in sorted(result.proposed.items()) if n == name]


@pytest.fixture
def published():
    yield
    gl.use_published_configs({}, {})


@pytest.mark.parametrize("solve", SOLVERS)
def test_sixteen_replicas_share_four_gpus_and_leave_four_whole(solve):
    gpus = node([pl.WHOLE] * 8)
    result = solve(gpus, {SHARED: 16})
    assert shapes_of(result) == [X4] * 4 + [pl.WHOLE] * 4
    assert result.unserved == {} and len(result.changed) == 4


@pytest.mark.parametrize("solve", SOLVERS)
def test_whole_demand_keeps_its_gpus_whole(solve):
    # Before issue 29 sharing took the whole node: 32 replicas and no whole GPU left.
    result = solve(node([pl.WHOLE] * 8), {SHARED: 16, WHOLE_CLASS: 4})
    assert shapes_of(result).count(X4) == 4 and shapes_of(result).count(pl.WHOLE) == 4
    assert result.unserved == {}
    assert solve(node([pl.WHOLE] * 8), {WHOLE_CLASS: 8}).changed == []


@pytest.mark.parametrize("solve", SOLVERS)
def test_a_shared_node_gives_back_the_gpus_whole_demand_needs(solve):
    result = solve(node([X4] * 8), {SHARED: 16, WHOLE_CLASS: 4})
    assert shapes_of(result).count(X4) == 4 and result.unserved == {}
    assert len(result.changed) == 4


@pytest.mark.parametrize("solve", SOLVERS)
def test_a_nodes_shared_gpus_share_one_replicas_count(solve):
    """Replicas of one node are one resource (nvidia.com/gpu.shared): units must be alike."""
    policy = pl.Policy(replica_options=(2, 4))
    for demand in (6, 10, 14):
        result = solve(node([pl.WHOLE] * 8), {SHARED: demand}, policy)
        shared = {s.replicas for s in shapes_of(result) if s.mode == "shared"}
        assert len(shared) == 1 and result.unserved == {}, (demand, shapes_of(result))


@pytest.mark.parametrize("solve", SOLVERS)
def test_a_node_keeping_busy_replicas_shares_more_gpus_with_the_same_count(solve):
    x2 = pl.Shape("shared", (), 2)
    gpus = node([x2] + [pl.WHOLE] * 7, busy={0: 1})
    result = solve(gpus, {SHARED: 8})
    assert shapes_of(result)[0] == x2
    assert {s for s in shapes_of(result) if s.mode == "shared"} == {x2}
    assert result.unserved == {}


def test_other_nodes_choose_their_replicas_apart():
    gpus = node([pl.WHOLE] * 2, "a") + node([pl.WHOLE] * 2, "b")
    result = pl.plan_exact(gpus, {SHARED: 12}, pl.Policy(replica_options=(2, 4)))
    assert result.unserved == {}
    for name in ("a", "b"):
        assert len({s.replicas for s in shapes_of(result, name) if s.mode == "shared"}) <= 1


def test_the_config_lists_the_shared_gpus_and_the_device_plugin_advertises_them(published):
    gpus = node([pl.WHOLE] * 8)
    result = pl.plan_exact(gpus, {SHARED: 16})
    (proposal,), new = mig_configs.propose_nodes(gpus, result, {"l": ("", "default")}, {})
    name, config = proposal.device_plugin_config, proposal.device_plugin_entry
    assert new == {} and proposal.mig_config == ""
    assert re.fullmatch(r"portal-time-sliced-4-[0-9a-f]{10}", name)
    assert config == {
        "version": "v1",
        "flags": {"migStrategy": "mixed"},
        "sharing": {
            "timeSlicing": {
                "renameByDefault": True,
                "resources": [
                    {"name": "nvidia.com/gpu", "replicas": 4, "devices": ["0", "1", "2", "3"]}
                ],
            }
        },
    }
    assert mig_configs.sharing_shapes(config, 8) == [X4] * 4 + [pl.WHOLE] * 4
    # what the local cluster (and NVIDIA's device plugin) makes of it
    gl.use_published_configs({}, {name: config})
    resources, labels = gl.node_gpu_state(L40S, 8, None, name)
    assert resources == {"nvidia.com/gpu": 4, "nvidia.com/gpu.shared": 16}
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"


def test_generated_sharing_configs_are_named_by_content_and_reused():
    config = mig_configs.sharing_config("mps", 4, [1, 3])
    name = mig_configs.generated_sharing_name("mps", 4, [1, 3])
    assert name == mig_configs.generated_sharing_name("mps", 4, [1, 3]) and len(name) <= 63
    assert name != mig_configs.generated_sharing_name("mps", 4, [1, 2])
    assert "mps" in config["sharing"] and name.startswith("portal-mps-4-")
    gpus = node([pl.WHOLE] * 4)
    result = pl.plan_exact(gpus, {SHARED: 8})
    assert shapes_of(result) == [X4, X4, pl.WHOLE, pl.WHOLE]
    known = {"ours": mig_configs.sharing_config("time-slicing", 4, [0, 1])}
    (proposal,), _ = mig_configs.propose_nodes(
        gpus, result, {"l": ("", "default")}, {}, known_dp=known
    )
    assert proposal.device_plugin_config == "ours" and proposal.device_plugin_entry is None


def test_sharing_shapes_read_all_a_count_or_a_list():
    def config(devices):
        return {"sharing": {"timeSlicing": {"resources": [dict(devices, name="nvidia.com/gpu")]}}}

    assert mig_configs.sharing_shapes(config({"replicas": 4}), 2) == [X4, X4]
    assert mig_configs.sharing_shapes(config({"replicas": 4, "devices": 1}), 2) == [X4, pl.WHOLE]
    assert mig_configs.sharing_shapes(config({"replicas": 4, "devices": [1]}), 2) == [pl.WHOLE, X4]
    assert mig_configs.sharing_shapes({"version": "v1"}, 2) == [pl.WHOLE, pl.WHOLE]


def test_a_node_sharing_nothing_goes_back_to_default():
    gpus = node([X4] * 2)
    result = pl.plan_exact(gpus, {WHOLE_CLASS: 2})
    (proposal,), _ = mig_configs.propose_nodes(
        gpus, result, {"l": ("", "time-sliced-4-renamed")}, {}
    )
    assert proposal.device_plugin_config == "default" and proposal.device_plugin_entry is None
