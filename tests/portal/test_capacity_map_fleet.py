"""The capacity map of a fleet (issue 54, item 1): grouped by cluster, the portal's own first and
the workers in the platform's order, each node drawn with what its own cluster's pods hold (node
names repeat from cluster to cluster); GPU models served through DRA said to be pinned to their
cluster. A single-cluster install's map shows as before, with no cluster headings."""

import re

import pytest

from scheduler.cluster import fleet, inventory, node_offers
from scheduler.cluster.models import Cluster, Node
from tests.scheduler.inventory_readings import gpu_node, gpu_pod, reading

pytestmark = pytest.mark.django_db
URL = "/console/capacity/"


def text(response) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def test_a_single_cluster_install_shows_as_before(client, world):
    inventory.record_inventory(reading([gpu_node("gpu-0")], []))
    client.force_login(world.admin)
    page = client.get(URL)
    body = text(page)
    assert page.status_code == 200 and "gpu-0" in body
    assert "Standalone" not in body and "pinned to" not in body
    assert "cluster/namespace" not in body and "Inventory synced" in body


def test_a_fleets_map_is_grouped_by_cluster_in_the_platforms_order(client, world):
    teams = {"tenant-team-a": world.tenant.slug}
    local = Cluster.objects.create(name="local")
    fleet.update_cluster(actor=world.admin, cluster=local, role="manager")
    for name, preference in (("west", 20), ("east", 10)):
        fleet.register_cluster(
            actor=world.admin,
            name=name,
            preference=preference,
            region=f"eu-{name}",
            price_factor="1.5" if name == "east" else "1",
            credentials_secret_name=f"{name}-kc",
        )
    pod = gpu_pod("tenant-team-a", "train", "gpu-0", {"nvidia.com/gpu": 3})
    inventory.record_inventory(reading([gpu_node("gpu-0")], []), cluster_name="local")
    inventory.record_inventory(reading([gpu_node("gpu-0")], [pod], teams), cluster_name="east")
    inventory.record_inventory(reading([gpu_node("gpu-0")], []), cluster_name="west")
    Cluster.objects.filter(name="west").update(last_sync_error="cluster west: connection refused")
    client.force_login(world.admin)
    html = client.get(URL).content.decode()
    body = text(client.get(URL))
    headings = re.findall(r'<h3 id="cluster-([a-z0-9-]+)-h">', html)
    assert headings == ["local", "east", "west"]  # the manager, then by preference
    assert "eu-east · price × 1.5" in body
    assert "Its inventory could not be read: cluster west: connection refused" in body
    # the team's pod is drawn on east's gpu-0 only
    east_part = html[html.index('id="cluster-east-h"') : html.index('id="cluster-west-h"')]
    local_part = html[html.index('id="cluster-local-h"') : html.index('id="cluster-east-h"')]
    assert "team-a" in east_part and "team-a" not in local_part
    assert "Each pool holds what the nodes of every cluster offer" in body


def test_gpu_models_served_through_dra_are_said_to_be_pinned_to_their_cluster(client, world):
    local = Cluster.objects.create(name="local")
    fleet.update_cluster(actor=world.admin, cluster=local, role="manager")
    east = fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="e-kc")
    inventory.record_inventory(reading([gpu_node("gpu-0")], []), cluster_name="local")
    inventory.record_inventory(
        reading([gpu_node("gpu-0", model="A100-80GB", gpus=2)], []), cluster_name="east"
    )
    Node.objects.filter(cluster=east).update(mig_strategy=node_offers.DRA)
    client.force_login(world.admin)
    body = text(client.get(URL))
    model = Node.objects.get(cluster=east).gpu_model
    assert f"{model} is served through DRA here: pinned to east." in body
    assert "MultiKueue copies no ResourceClaimTemplate or DeviceClass to a worker" in body
    assert "DRA: MIG on demand pinned to east" in body
    assert body.count("pinned to local") == 0


def test_an_archived_clusters_nodes_leave_the_map(client, world):
    local = Cluster.objects.create(name="local")
    fleet.update_cluster(actor=world.admin, cluster=local, role="manager")
    east = fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="e-kc")
    inventory.record_inventory(reading([gpu_node("gpu-0")], []), cluster_name="local")
    inventory.record_inventory(reading([gpu_node("gpu-9")], []), cluster_name="east")
    inventory.archive_cluster(actor=world.admin, cluster=east)
    client.force_login(world.admin)
    body = text(client.get(URL))
    assert "gpu-0" in body and "gpu-9" not in body
