"""The fleet's nodes as a real GPU cluster has them (pure): found and read by GPU feature
discovery's product label, no portal model label, tainted like a GPU node pool; and what `up`
changes on a node made by an older fleet."""

from __future__ import annotations

from localcluster import fleet
from localcluster import gpu_layout as gl

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
SEED = {"name": "gpu-x", "model": "H100-80GB", "gpus": 8, "migConfig": "all-3g.40gb"}


def test_every_fleet_model_is_read_back_from_its_product_label():
    for model in gl.fleet_spec()["models"]:
        _, labels = gl.node_gpu_state(model, 1, None, None)
        assert gl.model_of(labels) == model
        assert not set(labels) & set(gl.OBSOLETE_LABELS)
    assert gl.model_of({"nvidia.com/gpu.product": "Tesla-K80"}) is None
    assert gl.model_of({}) is None


# the fleet's GPU nodes say their toolkit hands devices only to the pods allocated them
TOOLKIT = {"gpu-portal.io/devices-as-mounts": "true"}


def test_a_node_is_tainted_and_tolerated_by_the_fleets_tolerations():
    node = fleet.node_manifest(SEED)
    assert node["spec"]["taints"] == [GPU_TAINT]
    assert node["metadata"]["labels"].items() >= TOOLKIT.items()
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert fleet.gpu_tolerations() == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_an_old_node_gets_the_taint_and_loses_the_model_label_keeping_the_rest():
    cordon = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    old = {
        "metadata": {"labels": {"gpu-portal/gpu-model": "H100-80GB", "nvidia.com/mig.config": "x"}},
        "spec": {"taints": [cordon]},
    }
    assert fleet.node_update(old) == {
        "spec": {"taints": [cordon, GPU_TAINT]},
        "metadata": {"labels": {"gpu-portal/gpu-model": None, **TOOLKIT}},
    }
    wrong_value = {
        "metadata": {"labels": TOOLKIT},
        "spec": {"taints": [{**GPU_TAINT, "value": "x"}]},
    }
    assert fleet.node_update(wrong_value) == {"spec": {"taints": [GPU_TAINT]}}


def test_an_up_to_date_node_needs_nothing():
    node = fleet.node_manifest(SEED)
    assert fleet.node_update(node) is None


def test_a_node_has_its_block_and_rack_and_old_nodes_get_them():
    placed = {**SEED, "topology": {"block": "b1", "rack": "r7"}}
    keys = gl.fleet_spec()["topologyLabels"]
    node = fleet.node_manifest(placed)
    assert {k: node["metadata"]["labels"][k] for k in keys.values()} == {
        keys["block"]: "b1",
        keys["rack"]: "r7",
    }
    old = {
        "metadata": {"labels": {keys["rack"]: "r1", **TOOLKIT}},
        "spec": {"taints": [GPU_TAINT]},
    }
    assert fleet.node_update(old, placed) == {
        "metadata": {"labels": {keys["block"]: "b1", keys["rack"]: "r7"}}
    }
    assert fleet.node_update(node, placed) is None
    racks = {
        fleet.node_manifest(n)["metadata"]["labels"][keys["rack"]] for n in fleet.node_templates()
    }
    assert len(racks) > 1  # the seed fleet spans racks: a gang's rack is worth showing
