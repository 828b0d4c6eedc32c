"""A worker's inventory and health on two local clusters (issue 54, items 1 and 5): registered
behind the manager with its kubeconfig in a Secret in Kueue's namespace, the worker
(localcluster/worker.py, fixture `kube_worker`) is read through its door (doors.door, from that
Secret): its KWOK GPU nodes are recorded under its own Cluster row and counted in the pools, and
its health check finds it well. A worker whose API server does not answer has its error on its
row, and the others are still read.

The manager's door is the local cluster's admin here (the suite's ServiceAccount reads no Secret
unless the chart's `multikueue.enabled` Role is installed)."""

from __future__ import annotations

import socket
from collections import Counter

import pytest

from catalog.models import Pool
from localcluster import worker
from scheduler.cluster import doors, fleet, inventory, kube, node_offers, tasks
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster, Node
from scheduler.cluster.render.multikueue import render_kubeconfig_secret
from tests.scheduler.fleet_standins import kubeconfig, secret, text

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

INSTANCE = "inv-test"
KUEUE_NAMESPACE = "kueue-system"


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"https://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def manager(kube_cluster, monkeypatch) -> KubeGateway:
    admin = KubeGateway.from_kubeconfig(str(kube_cluster.kubeconfig))
    monkeypatch.setattr(kube, "gateway", lambda: admin)
    doors.forget()
    yield admin
    doors.forget()


@pytest.fixture
def registered(world, manager, kube_worker):
    """The manager, the running local worker as `east`, and `gone`, whose server is closed."""
    east = render_kubeconfig_secret(
        "east", worker.kubeconfig_text(), namespace=KUEUE_NAMESPACE, instance=INSTANCE
    )
    gone = secret(text(kubeconfig(server=closed_port_url())))
    gone["metadata"] = {
        "name": f"gpu-portal-{INSTANCE}-gone-kubeconfig",
        "namespace": KUEUE_NAMESPACE,
    }
    gone.update(apiVersion="v1", type="Opaque")
    for obj in (east, gone):
        manager.apply(obj)
    local = Cluster.objects.create(name="local")
    fleet.update_cluster(actor=world.admin, cluster=local, role="manager")
    clusters = {
        name: fleet.register_cluster(
            actor=world.admin,
            name=name,
            preference=n,
            credentials_secret_name=obj["metadata"]["name"],
        )
        for n, (name, obj) in enumerate((("east", east), ("gone", gone)))
    }
    yield clusters
    for obj in (east, gone):
        manager.delete("Secret", obj["metadata"]["name"], KUEUE_NAMESPACE)


def test_a_workers_nodes_are_read_through_its_door_and_counted_in_the_pools(registered):
    east, gone = registered["east"], registered["gone"]
    read = tasks.sync_cluster_inventory(cluster_id=east.pk)
    assert sorted(read["added"]) == sorted(worker.NODES), read
    rows = Node.objects.filter(cluster=east)
    assert {n.name for n in rows} == set(worker.NODES)
    assert all(n.gpu_model and n.gpu_count for n in rows)
    east.refresh_from_db()
    assert east.last_sync_at is not None and east.last_sync_error == ""
    assert east.api_server == worker.server_url() and east.server_version
    # the pools count the worker's GPUs (the manager as last read: nothing of it is recorded
    # in this test's database, so the worker's alone, less what pods outside the teams hold)
    offered: Counter = Counter()
    for row in rows:
        node = inventory.node_of_row(row)
        if node_offers.offers_capacity(node):
            offered.update(node.units)
    assert offered
    for slug, units in offered.items():
        assert Pool.objects.get(resource_class__slug=slug).offered == units, slug

    # a worker that does not answer: its error on its row, nothing of it recorded
    said = tasks.sync_cluster_inventory(cluster_id=gone.pk)
    assert said["error"]
    gone.refresh_from_db()
    assert gone.last_sync_error and not Node.objects.filter(cluster=gone).exists()
    # ... and east is read again as before
    assert tasks.sync_cluster_inventory(cluster_id=east.pk)["added"] == []


def test_the_fleets_health_checks_find_the_worker_well_and_say_the_lost_one(registered):
    said = tasks.check_clusters()
    assert said["east"] == "ok", said
    assert "does not answer" in said["gone"]
    east = Cluster.objects.get(name="east")
    assert east.reachable is True and east.kueue_version == "0.19 or newer"
    assert "gone" in fleet.fleet_problems() and "east" not in fleet.fleet_problems()
