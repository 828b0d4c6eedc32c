"""The simulator also reads the configs the portal publishes as ConfigMaps (pure part)."""

import pytest
import yaml

from localcluster import gpu_layout as gl


@pytest.fixture
def published():
    yield
    gl.use_published_configs({}, {})


def test_published_mig_configs_add_to_the_file(published):
    mig_file = {
        "version": "v1",
        "mig-configs": {
            "portal-a100-80gb-x": [
                {"devices": [0], "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "3g.40gb": 1}},
                {"devices": [1], "mig-enabled": False},
            ]
        },
    }
    dp = {
        "time-sliced-3": yaml.safe_dump(
            {
                "version": "v1",
                "sharing": {
                    "timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}
                },
            }
        )
    }
    with pytest.raises(gl.LayoutError):
        gl.node_gpu_state("A100-80GB", 2, "portal-a100-80gb-x", None)
    gl.use_published_configs(
        *gl.parse_published(
            [("mig-parted", {"config.yaml": yaml.safe_dump(mig_file)}), ("device-plugin", dp)]
        )
    )
    resources, _ = gl.node_gpu_state("A100-80GB", 2, "portal-a100-80gb-x", None)
    assert resources == {
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-4g.40gb": 1,
        "nvidia.com/mig-3g.40gb": 1,
    }
    assert "all-1g.10gb" in gl.all_mig_configs()  # the file's configs stay
    resources, labels = gl.node_gpu_state("L40S-48GB", 2, None, "time-sliced-3")
    assert resources == {"nvidia.com/gpu": 6} and labels["nvidia.com/gpu.replicas"] == "3"
