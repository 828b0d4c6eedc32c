"""Reading nodes (pure) and syncing the inventory from the real local cluster."""

import uuid

import pytest
from django.db import connection

from catalog.models import Pool, ResourceClass
from localcluster.fleet import node_manifest
from scheduler.cluster import inventory, node_offers
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster, Node, PodAllocation
from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.cluster.reconcile.specs import tenant_namespace
from tenants.models import AuditEvent
from tenants.services.grants import grant_quota
from tenants.services.tenants import create_tenant
from tests.scheduler.cluster_helpers import restricted_pod, unique_slug, wait_for


def node(labels, allocatable, unschedulable=False, ready="True"):
    return {
        "metadata": {"name": "n1", "uid": "u1", "labels": labels},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "allocatable": {"cpu": "8", **allocatable},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


A100_MIXED = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.count": "4",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "mixed",
    "nvidia.com/gpu.sharing-strategy": "none",
}


def test_mixed_strategy_node():
    info = node_offers.parse_node(
        node(
            A100_MIXED,
            {
                "nvidia.com/gpu": "2",
                "nvidia.com/mig-3g.40gb": "2",
                "nvidia.com/mig-1g.10gb": "7",
                "nvidia.com/mig-1g.10gb.me": "1",
            },
        )
    )
    assert info.gpu_model == "A100-80GB" and info.gpu_count == 4 and info.ready
    assert info.units == {
        "a100-80gb": 2,
        "a100-80gb-mig-3g.40gb": 2,
        "a100-80gb-mig-1g.10gb": 7,
        "a100-80gb-mig-1g.10gb.me": 1,
    }
    assert "cpu" not in info.allocatable


def test_time_sliced_replicas_count_as_shared_whether_renamed_or_not():
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-L40S",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.replicas": "4",
    }
    assert node_offers.parse_node(node(labels, {"nvidia.com/gpu": "16"})).units == {
        "l40s-48gb-shared": 16
    }
    assert node_offers.parse_node(node(labels, {"nvidia.com/gpu.shared": "16"})).units == {
        "l40s-48gb-shared": 16
    }


def test_single_strategy_counts_mig_devices_under_nvidia_com_gpu():
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        "nvidia.com/mig.strategy": "single",
    }
    info = node_offers.parse_node(node(labels, {"nvidia.com/gpu": "56"}))
    assert info.gpu_model == "H100-80GB"
    assert info.units == {"h100-80gb-mig-1g.10gb": 56}


def test_unknown_gpus_and_cpu_nodes_offer_nothing():
    assert (
        node_offers.parse_node(
            node({"nvidia.com/gpu.product": "Tesla-K80"}, {"nvidia.com/gpu": "2"})
        ).units
        == {}
    )
    assert node_offers.parse_node(node({}, {})).gpu_model == ""


def test_cordoned_and_not_ready_nodes_add_no_capacity():
    ok = node_offers.parse_node(node(A100_MIXED, {"nvidia.com/gpu": "2"}))
    cordoned = node_offers.parse_node(node(A100_MIXED, {"nvidia.com/gpu": "2"}, unschedulable=True))
    sick = node_offers.parse_node(node(A100_MIXED, {"nvidia.com/gpu": "2"}, ready="False"))
    assert node_offers.pool_capacities([ok, cordoned, sick]) == {"a100-80gb": 2}


# --- against the cluster ----------------------------------------------------------------------


@pytest.fixture
def extra_node(kube_admin):
    """A fresh simulated A100 node with 4 GPUs in all-1g.10gb; deleted afterwards."""
    name = f"inv-a100-{uuid.uuid4().hex[:6]}"
    kube_admin.create(
        node_manifest(
            {
                "name": name,
                "model": "A100-80GB",
                "gpus": 4,
                "migConfig": "all-1g.10gb",
                "devicePluginConfig": "default",
            }
        )
    )
    wait_for(
        "node Ready",
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (kube_admin.get("Node", name) or {}).get("status", {}).get("conditions", [])
        ),
    )
    yield name
    kube_admin.delete("Node", name)


def capacity(slug):
    return Pool.objects.get(resource_class__slug=slug).capacity


@pytest.mark.cluster
@pytest.mark.django_db
def test_sync_follows_the_fleet(kube, kube_admin, extra_node):
    first = inventory.sync_inventory(kube)
    assert "gpu-h200-0" in Node.objects.values_list("name", flat=True)
    assert extra_node in first.added or Node.objects.filter(name=extra_node).exists()
    seed_1g = 7
    assert capacity("a100-80gb-mig-1g.10gb") == seed_1g + 28
    assert capacity("h100-80gb-mig-3g.40gb") == 16
    assert capacity("h200-141gb") == 8
    assert ResourceClass.objects.filter(slug="l40s-48gb-shared").exists()
    cluster = Cluster.objects.get(name="local")
    assert cluster.last_sync_at is not None
    # The API server's version, read before the transaction like everything else.
    assert cluster.server_version.startswith("v1.") and cluster.server_version == (
        kube.server_version()
    )
    assert inventory.sync_inventory(kube).pools_changed == {}  # idempotent

    # Relabel: the simulated MIG manager repartitions; one sync later the pools follow.
    kube.merge_patch(
        "Node", extra_node, {"metadata": {"labels": {"nvidia.com/mig.config": "all-3g.40gb"}}}
    )
    wait_for(
        "MIG manager success",
        lambda: (
            kube.get("Node", extra_node)["metadata"]["labels"].get("nvidia.com/mig.config.state")
            == "success"
            and kube.get("Node", extra_node)["metadata"]["labels"].get(
                "gpu-portal.local/mig.config.observed", "all-3g.40gb"
            )
            == "all-3g.40gb"
            and "nvidia.com/mig-3g.40gb" in kube.get("Node", extra_node)["status"]["allocatable"]
        ),
        timeout=30,
    )
    changed = inventory.sync_inventory(kube)
    assert capacity("a100-80gb-mig-1g.10gb") == seed_1g
    assert capacity("a100-80gb-mig-3g.40gb") == 2 + 8
    assert changed.pools_changed["a100-80gb-mig-3g.40gb"] == (2, 10)
    assert Node.objects.get(name=extra_node).mig_config == "all-3g.40gb"
    assert AuditEvent.objects.filter(verb="pool.synced").exists()

    # Cordon: the node stays in the inventory, its GPUs leave the pools.
    kube.merge_patch("Node", extra_node, {"spec": {"unschedulable": True}})
    inventory.sync_inventory(kube)
    assert not Node.objects.get(name=extra_node).schedulable
    assert capacity("a100-80gb-mig-3g.40gb") == 2

    # Delete (an operator's doing, not the portal's): gone from the inventory.
    kube_admin.delete("Node", extra_node)
    result = inventory.sync_inventory(kube)
    assert extra_node in result.removed
    assert not Node.objects.filter(name=extra_node).exists()


@pytest.mark.cluster
@pytest.mark.django_db
def test_sync_records_which_tenant_pods_hold_gpus(kube, kube_admin, tenant_namespaces, world):

    tenant = create_tenant(actor=world.admin, slug=unique_slug("alloc"), name="A")
    inventory.sync_inventory(kube)
    rc = ResourceClass.objects.get(slug="rtx4090-24gb")
    grant_quota(actor=world.admin, tenant=tenant, resource_class=rc, amount=1)
    ns = tenant_namespace(tenant)
    tenant_namespaces.append(ns)
    reconcile_tenant(kube, tenant.pk)
    wait_for(
        "quota status", lambda: kube.get("ResourceQuota", "gpu-portal-quota", ns).get("status")
    )
    pod = restricted_pod("holder", {"nvidia.com/gpu": 1})
    pod["metadata"]["namespace"] = ns
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090"}
    kube_admin.create(pod)  # the team's own pod
    wait_for(
        "pod running", lambda: kube.get("Pod", "holder", ns)["status"].get("phase") == "Running"
    )

    inventory.sync_inventory(kube)

    allocation = PodAllocation.objects.get(namespace=ns, pod_name="holder")
    assert allocation.tenant == tenant and allocation.node_name == "gpu-rtx4090-0"
    assert allocation.resources == {"nvidia.com/gpu": 1} and allocation.phase == "Running"
    kube_admin.delete("Pod", "holder", ns)
    wait_for("pod gone", lambda: kube.get("Pod", "holder", ns) is None, timeout=30)
    inventory.sync_inventory(kube)
    assert not PodAllocation.objects.filter(namespace=ns).exists()


class _TransactionWatchingGateway(KubeGateway):
    """The real gateway to the local cluster, noting whether each call to the API server was
    made inside a transaction the code under test opened."""

    def __init__(self, api_client, baseline: int):
        super().__init__(api_client)
        self.baseline = baseline
        self.calls_in_transaction: list[str] = []

    def _call(self, verb, kind, method, path, **kwargs):
        if len(connection.savepoint_ids) > self.baseline:
            self.calls_in_transaction.append(f"{verb} {kind}")
        return super()._call(verb, kind, method, path, **kwargs)


@pytest.mark.cluster
@pytest.mark.django_db
def test_sync_calls_the_api_server_outside_its_transaction(kube):
    """Approvals lock pools; the sync must not hold those locks while it waits on the cluster."""
    watching = _TransactionWatchingGateway(kube.api, baseline=len(connection.savepoint_ids))
    result = inventory.sync_inventory(watching)
    assert sum(watching.stats.calls.values()) >= 3  # nodes, pods, namespaces (and the version)
    assert watching.calls_in_transaction == []
    assert Node.objects.exists() and result is not None
