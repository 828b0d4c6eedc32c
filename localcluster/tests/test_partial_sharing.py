"""The simulated device plugin honours `devices` in a sharing entry (pure): only the GPUs an
entry lists, or the first `count` of them, are shared; the rest stay nvidia.com/gpu."""

import pytest

from localcluster import gpu_layout as gl


def sharing(devices=None, *, rename=True, section="timeSlicing", name="nvidia.com/gpu"):
    resource = {"name": name, "replicas": 4}
    if devices is not None:
        resource["devices"] = devices
    body = {"resources": [resource]}
    if rename:
        body["renameByDefault"] = True
    return {"version": "v1", "flags": {"migStrategy": "mixed"}, "sharing": {section: body}}


@pytest.fixture
def publish():
    def use(**configs):
        gl.use_published_configs({}, configs)

    yield use
    gl.use_published_configs({}, {})


@pytest.mark.parametrize("devices", [["0", "1"], [0, 1], 2, ["6", "7"]])
def test_two_gpus_of_eight_shared(publish, devices):
    publish(part=sharing(devices))
    resources, labels = gl.node_gpu_state("L40S-48GB", 8, None, "part")
    assert resources == {"nvidia.com/gpu": 6, "nvidia.com/gpu.shared": 8}
    assert labels["nvidia.com/gpu.replicas"] == "4"


def test_all_and_no_devices_share_every_gpu(publish):
    publish(all=sharing("all"), implicit=sharing())
    for name in ("all", "implicit"):
        assert gl.node_gpu_state("L40S-48GB", 8, None, name)[0] == {"nvidia.com/gpu.shared": 32}


def test_without_renaming_shared_and_whole_gpus_are_one_resource(publish):
    publish(plain=sharing(["0"], rename=False), mps=sharing(["0", "3"], section="mps"))
    assert gl.node_gpu_state("L40S-48GB", 4, None, "plain")[0] == {"nvidia.com/gpu": 3 + 4}
    assert gl.node_gpu_state("L40S-48GB", 4, None, "mps")[0] == {
        "nvidia.com/gpu": 2,
        "nvidia.com/gpu.shared": 8,
    }


def test_on_a_mig_node_only_gpus_mig_leaves_whole_can_be_listed(publish):
    mig = {
        "half": [
            {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
            {"devices": [1], "mig-enabled": False},
        ]
    }
    gl.use_published_configs(mig, {"one": sharing(["1"]), "zero": sharing(["0"])})
    resources, _ = gl.node_gpu_state("A100-80GB", 2, "half", "one")
    assert resources == {"nvidia.com/mig-3g.40gb": 2, "nvidia.com/gpu.shared": 4}
    with pytest.raises(gl.LayoutError, match="GPU 0"):
        gl.node_gpu_state("A100-80GB", 2, "half", "zero")


@pytest.mark.parametrize(
    "devices", [["8"], ["0", "0"], 9, 0, ["GPU-8a2c0b1e-0000-0000-0000-000000000000"], "some"]
)
def test_devices_that_cannot_be_shared_fail_the_change(publish, devices):
    publish(bad=sharing(devices))
    with pytest.raises(gl.LayoutError):
        gl.node_gpu_state("L40S-48GB", 8, None, "bad")


def test_mig_devices_are_shared_all_or_by_count(publish):
    mig = {"sevenths": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}
    name = "nvidia.com/mig-1g.10gb"
    gl.use_published_configs(
        mig,
        {"three": sharing(3, rename=False, name=name), "list": sharing(["0:1"], name=name)},
    )
    resources, _ = gl.node_gpu_state("A100-80GB", 1, "sevenths", "three")
    assert resources == {name: 4 + 3 * 4}
    with pytest.raises(gl.LayoutError, match="not simulated"):
        gl.node_gpu_state("A100-80GB", 1, "sevenths", "list")
