"""A plan that shares only some GPUs of a node: its generated device-plugin config is kept,
published with every other config, and read back from the inventory (database, no cluster)."""

import pytest
import yaml

from catalog.models import ResourceClass
from catalog.services import ensure_resource_classes
from scheduler.cluster.models import Node
from scheduler.mig import planner as pl
from scheduler.mig import proposals, publishing
from scheduler.mig.models import DevicePluginConfig
from tests.scheduler.factories import NodeFactory, PodAllocationFactory
from tests.tenants.factories import QuotaGrantFactory

pytestmark = pytest.mark.django_db


class RecordingKube:
    def __init__(self):
        self.applied = []

    def apply(self, manifest):
        self.applied.append(manifest)


@pytest.fixture
def l40s(world):
    """One 8-GPU L40S node, all whole; grants for 16 shared replicas."""
    ensure_resource_classes(["L40S-48GB"])
    NodeFactory(
        name="l40s-0",
        gpu_model="L40S-48GB",
        gpu_product="NVIDIA-L40S",
        gpu_count=8,
        mig_config="",
        device_plugin_config="default",
        allocatable={"nvidia.com/gpu": 8},
    )
    QuotaGrantFactory(
        tenant=world.tenant,
        resource_class=ResourceClass.objects.get(slug="l40s-48gb-shared"),
        amount=16,
    )
    return world


def test_a_plan_shares_four_gpus_and_the_rollout_publishes_their_config(l40s):
    plan = proposals.create_plan(actor=l40s.admin)
    (entry,) = plan.nodes
    name = entry["device_plugin_config"]
    assert entry["mig_config"] == "" and entry["changed_gpus"] == [0, 1, 2, 3]
    assert [s["mode"] for s in entry["proposed"]] == ["shared"] * 4 + ["whole"] * 4
    resources = plan.device_plugin_configs[name]["sharing"]["timeSlicing"]["resources"]
    assert resources == [{"name": "nvidia.com/gpu", "replicas": 4, "devices": ["0", "1", "2", "3"]}]

    kube = RecordingKube()
    publishing.publish_configs(kube, plan)
    assert DevicePluginConfig.objects.get(name=name).config == plan.device_plugin_configs[name]
    dp_map = next(
        m for m in kube.applied if m["metadata"].get("name", "").endswith("-device-plugin-config")
    )
    assert yaml.safe_load(dp_map["data"][name]) == plan.device_plugin_configs[name]
    assert "time-sliced-4-renamed" in dp_map["data"]  # the file's configs stay

    # a later publication (another plan, nothing generated) still carries it
    kube = RecordingKube()
    publishing.publish_configs(kube, proposals.create_plan(actor=l40s.admin, demand={}))
    dp_map = next(
        m for m in kube.applied if m["metadata"].get("name", "").endswith("-device-plugin-config")
    )
    assert name in dp_map["data"]


def test_the_inventory_reads_which_gpus_a_node_shares(l40s):
    plan = proposals.create_plan(actor=l40s.admin)
    name = plan.nodes[0]["device_plugin_config"]
    publishing.publish_configs(RecordingKube(), plan)
    # what the sync writes once the node advertises its new resources
    Node.objects.filter(name="l40s-0").update(
        device_plugin_config=name,
        sharing_replicas=4,
        sharing_strategy="time-slicing",
        allocatable={"nvidia.com/gpu": 4, "nvidia.com/gpu.shared": 16},
    )
    PodAllocationFactory(
        node_name="l40s-0", tenant=l40s.tenant, resources={"nvidia.com/gpu": 1}, pod_name="train"
    )
    gpus, labels = proposals.fleet_from_inventory()
    assert [g.shape for g in gpus] == [pl.Shape("shared", (), 4)] * 4 + [pl.WHOLE] * 4
    assert labels["l40s-0"] == ("", name)
    # a pod on nvidia.com/gpu holds a whole GPU (the renamed replicas are another resource)
    assert [g.busy for g in gpus if g.busy] == [(("l40s-48gb", 1),)]
    assert gpus[4].pods == ("team-a/train",)
    # nothing more to do: the demand is served as the node stands
    assert proposals.create_plan(actor=l40s.admin).nodes[0]["changed_gpus"] == []
