"""GPUs used outside the portal on the local cluster (issue 48, 4): a pod holding a whole H200
in a namespace no team owns takes one unit out of the pool at the next inventory sync, and the
capacity map names its namespace. On a fresh node of its own: the seed nodes' GPUs may be held
by other tests, and this test's pod holds none of theirs."""

import uuid

import pytest

from catalog.models import Pool
from localcluster.fleet import node_manifest
from scheduler.cluster import inventory
from tests.scheduler.cluster_helpers import node_ready, scheduled_pod_for, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


@pytest.fixture
def h200_node(kube_admin):
    """A fresh simulated node with 2 whole H200s; deleted afterwards."""
    name = f"outside-h200-{uuid.uuid4().hex[:6]}"
    kube_admin.create(
        node_manifest(
            {
                "name": name,
                "model": "H200-141GB",
                "gpus": 2,
                "migConfig": "all-disabled",
                "devicePluginConfig": "default",
            }
        )
    )
    wait_for(f"{name} Ready", lambda: node_ready(kube_admin, name))
    yield name
    kube_admin.delete("Node", name)


def h200_pool() -> Pool:
    return Pool.objects.get(resource_class__slug="h200-141gb")


def test_a_gpu_pod_outside_the_teams_leaves_the_pool_and_the_map_names_it(
    kube, kube_admin, h200_node, kube_namespace, world, client
):
    # kube_namespace: made by the cluster's admin, no tenant label; it and its pods are
    # deleted after, before the node
    inventory.sync_inventory(kube)
    before = h200_pool()
    assert before.capacity >= 2  # the fresh node's, at least

    scheduled_pod_for(kube_admin, kube_namespace, h200_node, "serving", "nvidia.com/gpu")
    wait_for(
        "the outside pod running",
        lambda: (
            (kube.get("Pod", "serving", kube_namespace) or {}).get("status", {}).get("phase")
            == "Running"
        ),
    )
    inventory.sync_inventory(kube)  # as the portal's own ServiceAccount

    after = h200_pool()
    assert after.outside_namespaces.get(kube_namespace) == 1
    assert after.capacity == before.capacity - 1
    assert after.outside_use == before.outside_use + 1
    assert after.offered == before.offered  # the node offers what it did

    client.force_login(world.admin)
    page = client.get("/console/capacity/").content.decode()
    assert f"{kube_namespace} (1)" in page
