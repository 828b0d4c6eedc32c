"""Inventory per cluster (issue 54, item 1): each worker's nodes and GPU pods are recorded under
its own Cluster row (node names may repeat from cluster to cluster), the pools hold what every
active cluster offers, a worker that cannot be read has its error on its row while the others go
on, and a single-cluster install is recorded exactly as before."""

from __future__ import annotations

import pytest

from catalog.models import Pool
from core.errors import TransientClusterError
from scheduler.cluster import fleet, inventory, node_offers, outside_use, tasks
from scheduler.cluster.models import Cluster, Node, PodAllocation
from tests.scheduler.inventory_readings import gpu_node, gpu_pod, reading

H200, H100 = "h200-141gb", "h100-80gb"


# --- pure -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "manifest",
    [
        gpu_node("a"),
        gpu_node("b", model="H100-80GB", gpus=4),
        {**gpu_node("c"), "spec": {"unschedulable": True}},
    ],
    ids=["whole", "another-model", "cordoned"],
)
def test_a_node_read_again_from_its_row_offers_what_it_offered(db, manifest):
    info = node_offers.parse_node(manifest)
    row = Node(name=info.name, **{f: getattr(info, f) for f in inventory.NODE_FIELDS})
    again = inventory.node_of_row(row)
    assert again.units == info.units and again.units
    assert node_offers.offers_capacity(again) == node_offers.offers_capacity(info)


def test_a_health_tainted_or_unpublished_dra_row_offers_nothing():
    info = node_offers.parse_node(gpu_node("a"))
    values = {f: getattr(info, f) for f in inventory.NODE_FIELDS}
    tainted = Node(name="a", **{**values, "taints": [node_offers.HEALTH_TAINT_KEY]})
    assert not node_offers.offers_capacity(inventory.node_of_row(tainted))
    unpublished = Node(name="a", **{**values, "mig_strategy": node_offers.DRA_UNPUBLISHED})
    assert inventory.node_of_row(unpublished).units == {}


def test_the_fleets_pools_add_each_clusters_and_say_where_outside_use_is():
    sizes = inventory.add_sizes(
        {
            "local": {H200: outside_use.PoolSize(8, {"serving": 2})},
            "east": {
                H200: outside_use.PoolSize(8, {"serving": 1}),
                H100: outside_use.PoolSize(4),
            },
        }
    )
    assert sizes[H200] == outside_use.PoolSize(16, {"east/serving": 1, "local/serving": 2})
    assert (sizes[H200].capacity, sizes[H100].capacity) == (13, 4)


# --- recorded -------------------------------------------------------------------------------------


@pytest.fixture
def east(world) -> Cluster:
    local = Cluster.objects.create(name="local")
    fleet.update_cluster(actor=world.admin, cluster=local, role="manager")
    return fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="e-kc")


def pool(slug: str) -> Pool:
    return Pool.objects.get(resource_class__slug=slug)


@pytest.mark.django_db
def test_each_cluster_is_recorded_under_its_row_and_the_pools_add_them(world, east):
    teams = {"tenant-team-a": world.tenant.slug}
    home_pods = [
        gpu_pod("tenant-team-a", "train", "gpu-0", {"nvidia.com/gpu": 2}),
        gpu_pod("serving", "llm", "gpu-0", {"nvidia.com/gpu": 1}),
    ]
    inventory.record_inventory(reading([gpu_node("gpu-0")], home_pods, teams), cluster_name="local")
    # in a fleet, a namespace outside the teams is said with its cluster
    assert (pool(H200).capacity, pool(H200).outside_namespaces) == (7, {"local/serving": 1})
    # the worker has a node of the same name, and a pod of the same uid
    east_pods = [
        gpu_pod("tenant-team-a", "train", "gpu-0", {"nvidia.com/gpu": 4}),
        gpu_pod("serving", "llm", "gpu-0", {"nvidia.com/gpu": 2}),
    ]
    result = inventory.record_inventory(
        reading(
            [gpu_node("gpu-0"), gpu_node("gpu-1", model="H100-80GB", gpus=4)], east_pods, teams
        ),
        cluster_name="east",
    )
    assert sorted(result.added) == ["gpu-0", "gpu-1"]
    assert sorted(Node.objects.values_list("cluster__name", "name")) == [
        ("east", "gpu-0"),
        ("east", "gpu-1"),
        ("local", "gpu-0"),
    ]
    held = {
        (a.cluster.name, a.pod_name): (a.resources, a.tenant_id)
        for a in PodAllocation.objects.select_related("cluster")
    }
    assert held[("east", "train")] == ({"nvidia.com/gpu": 4}, world.tenant.pk)
    assert held[("local", "train")] == ({"nvidia.com/gpu": 2}, world.tenant.pk)
    # the pools: both clusters' H200s less what is held outside the teams on each
    h200 = pool(H200)
    assert (h200.offered, h200.capacity) == (16, 13)
    assert h200.outside_namespaces == {"east/serving": 2, "local/serving": 1}
    assert pool(H100).capacity == 4
    # the home cluster read again (nothing changed there): the worker's part stays counted
    again = inventory.record_inventory(
        reading([gpu_node("gpu-0")], home_pods, teams), cluster_name="local"
    )
    assert again.pools_changed == {} and pool(H200).capacity == 13
    assert Cluster.objects.get(name="east").last_sync_at is not None


@pytest.mark.django_db
def test_an_archived_worker_no_longer_counts_in_the_pools(world, east):
    inventory.record_inventory(reading([gpu_node("gpu-0")], []), cluster_name="east")
    inventory.record_inventory(reading([gpu_node("gpu-0")], []), cluster_name="local")
    assert pool(H200).capacity == 16
    inventory.archive_cluster(actor=world.admin, cluster=east)
    inventory.record_inventory(reading([gpu_node("gpu-0")], []), cluster_name="local")
    assert pool(H200).capacity == 8


@pytest.mark.django_db
def test_a_worker_that_cannot_be_read_says_so_and_keeps_its_last_reading(world, east):
    inventory.record_inventory(reading([gpu_node("gpu-0")], []), cluster_name="east")

    def door(name):
        raise TransientClusterError(f"cluster {name}: connection refused")

    done = inventory.sync_cluster("east", door)
    assert done.result is None and "connection refused" in done.error
    row = Cluster.objects.get(name="east")
    assert "connection refused" in row.last_sync_error
    assert Node.objects.filter(cluster=row).count() == 1  # as last read
    # the home cluster's sync counts it as last read
    inventory.record_inventory(reading([gpu_node("gpu-0")], []), cluster_name="local")
    assert pool(H200).capacity == 16


@pytest.mark.django_db
def test_the_beat_task_syncs_each_worker_in_a_task_of_its_own(world, east, monkeypatch):
    west = fleet.register_cluster(actor=world.admin, name="west", credentials_secret_name="w-kc")
    sent: list[int] = []
    monkeypatch.setattr(tasks.sync_cluster_inventory, "delay", lambda **kw: sent.append(kw))
    home_read: list[str] = []

    def sync_home(gateway, *, cluster_name):
        home_read.append(cluster_name)
        return inventory.InventorySync()

    monkeypatch.setattr(inventory, "sync_inventory", sync_home)
    monkeypatch.setattr(tasks.kube, "gateway", lambda: object())
    tasks.sync_inventory()
    assert sent == [{"cluster_id": east.pk}, {"cluster_id": west.pk}]
    assert home_read == ["local"]

    # one worker's task: a worker that is down records its error, the next one is read
    def door(name):
        if name == "east":
            raise TransientClusterError("cluster east: connection refused")
        return "west's gateway"

    monkeypatch.setattr(tasks.doors, "door", door)
    monkeypatch.setattr(inventory, "read_cluster", lambda gateway: reading([gpu_node("g")], []))
    assert "connection refused" in tasks.sync_cluster_inventory(cluster_id=east.pk)["error"]
    assert tasks.sync_cluster_inventory(cluster_id=west.pk)["added"] == ["g"]
    inventory.archive_cluster(actor=world.admin, cluster=west)
    assert tasks.sync_cluster_inventory(cluster_id=west.pk)["error"] == "not an active cluster"


@pytest.mark.django_db
def test_a_single_cluster_install_reads_no_other_cluster(world, monkeypatch):
    """No Cluster rows at first, then the one standalone row the first sync makes: the pools are
    that cluster's alone, no worker task is queued, and its errors are recorded as ever."""
    sent: list = []
    monkeypatch.setattr(tasks.sync_cluster_inventory, "delay", lambda **kw: sent.append(kw))
    inventory.record_inventory(reading([gpu_node("gpu-0")], []))
    assert list(Cluster.objects.values_list("name", "role")) == [("local", "standalone")]
    assert pool(H200).capacity == 8 and pool(H200).outside_namespaces == {}
    monkeypatch.setattr(tasks.kube, "gateway", lambda: object())

    def refuse(gateway, *, cluster_name):
        raise TransientClusterError("connection refused")

    monkeypatch.setattr(inventory, "sync_inventory", refuse)
    with pytest.raises(TransientClusterError):
        tasks.sync_inventory.run()
    assert sent == []
    assert Cluster.objects.get(name="local").last_sync_error == "connection refused"
