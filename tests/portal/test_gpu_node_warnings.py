"""Security, third pass (2), the node side: GPU nodes without the GPU taint, or whose toolkit
the platform has not said hands devices only to the pods allocated them, are named on the
console's capacity page with what to do."""

import pytest
from django.utils import timezone

from scheduler.cluster import node_offers
from tests.scheduler.factories import NodeFactory

NODE = {
    "metadata": {"name": "n", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
    "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
    "status": {},
}


def test_the_inventory_reads_a_nodes_taints_and_names_the_unguarded():
    tainted = node_offers.parse_node(NODE)
    assert tainted.taints == ["nvidia.com/gpu"]
    bare = node_offers.parse_node({**NODE, "spec": {}})
    said = node_offers.parse_node(
        {
            **NODE,
            "metadata": {
                "name": "ok",
                "labels": {**NODE["metadata"]["labels"], node_offers.TOOLKIT_LABEL: "true"},
            },
        }
    )
    assert said.labels[node_offers.TOOLKIT_LABEL] == "true"  # kept by the inventory
    found = node_offers.unguarded_gpu_nodes([tainted, bare, said], {"nvidia.com/gpu"})
    assert found == {"untainted": ["n"], "toolkit_unsaid": ["n", "n"]}


@pytest.mark.django_db
def test_the_capacity_page_warns_of_unguarded_gpu_nodes(client, world):
    NodeFactory(name="gpu-fine", last_seen_at=timezone.now())
    NodeFactory(name="gpu-open", taints=[], labels={}, last_seen_at=timezone.now())
    client.force_login(world.admin)
    page = client.get("/console/capacity/").content.decode()
    assert "GPU node without the GPU taint: gpu-open." in page
    assert "not labelled gpu-portal.io/devices-as-mounts=true: gpu-open." in page
    assert "gpu-fine." not in page
