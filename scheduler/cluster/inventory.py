"""Inventory: what the cluster has (nodes, GPUs, the GPU pods on them) read into PostgreSQL, and
the pools' capacity derived from it; and archiving a cluster the portal no longer manages."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from catalog import gpu_serving
from catalog.models import Pool
from catalog.product_labels import configured_product_labels
from catalog.services import ensure_resource_classes
from core import audit
from core.errors import InvalidTransition
from core.permissions import require_platform_admin
from scheduler.cluster import node_offers, outside_use
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster, Node, PodAllocation
from scheduler.cluster.render.labels import TENANT_LABEL
from tenants.models import Tenant


@dataclass
class InventorySync:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    pools_changed: dict[str, tuple[int, int]] = field(default_factory=dict)


NODE_FIELDS = [
    "uid",
    "gpu_model",
    "gpu_product",
    "gpu_count",
    "gpu_memory_mib",
    "mig_strategy",
    "mig_config",
    "mig_config_state",
    "sharing_strategy",
    "sharing_replicas",
    "device_plugin_config",
    "allocatable",
    "labels",
    "schedulable",
    "ready",
    "taints",
]


@dataclass(frozen=True)
class ClusterReading:
    """What one sync reads of the cluster, all of it before any transaction."""

    nodes: list[node_offers.NodeInfo]  # GPU nodes only
    pods: list[node_offers.PodInfo]  # pods holding GPUs
    namespaces: dict[str, str | None]  # tenant namespace -> its tenant label
    api_server: str = ""
    server_version: str = ""


def read_cluster(kube: KubeGateway) -> ClusterReading:
    labels_by_model = configured_product_labels()
    levels = set(settings.GPU_TOPOLOGY_LEVELS.values())
    dra = gpu_serving.dra_models()
    # a DRA node's devices are its ResourceSlices, a DRA pod's its claims (neither read where
    # no model is served so)
    published = node_offers.published_nodes(kube.list("ResourceSlice")) if dra else None
    nodes = [
        node_offers.parse_node(n, labels_by_model, levels, dra, published)
        for n in kube.list("Node")
    ]
    claims = node_offers.claim_devices(kube.list("ResourceClaim")) if dra else {}
    pods = (node_offers.parse_gpu_pod(p, claims) for p in kube.list("Pod"))
    return ClusterReading(
        nodes=[n for n in nodes if n.gpu_model],
        pods=[p for p in pods if p is not None],
        namespaces={
            ns["metadata"]["name"]: (ns["metadata"].get("labels") or {}).get(TENANT_LABEL)
            for ns in kube.list("Namespace", label_selector=TENANT_LABEL)
        },
        api_server=kube.api.configuration.host,
        server_version=kube.server_version(),
    )


def system_namespaces() -> set[str]:
    """The platform's own namespaces: GPU pods there are not counted as used outside the
    portal (scheduler/cluster/outside_use.py says why)."""
    return {
        outside_use.KUBE_SYSTEM,
        settings.PLATFORM_NAMESPACE,
        settings.GPU_OPERATOR_NAMESPACE,
        settings.CLUSTER_DNS_NAMESPACE,
    }


def sync_inventory(kube: KubeGateway, *, cluster_name: str = "local") -> InventorySync:
    """Mirror the cluster's GPU nodes into the inventory and set every pool's capacity from
    them, less what pods outside the teams hold. Idempotent; a pool whose capacity or outside
    use changes gets one audit event. Every call to the API server happens before the
    transaction (`read_cluster`): approvals never wait on the cluster for a pool lock."""
    return record_inventory(read_cluster(kube), cluster_name=cluster_name)


POOL_SYNCED_FIELDS = ("capacity", "source", "outside_use", "outside_namespaces")


def record_inventory(reading: ClusterReading, *, cluster_name: str = "local") -> InventorySync:
    """Write what `read_cluster` read: the nodes, the pods holding GPUs, and each pool's
    capacity, the nodes' units less those used outside the portal."""
    gpu_nodes = reading.nodes
    result = InventorySync()
    now = timezone.now()
    ensure_resource_classes(sorted({n.gpu_model for n in gpu_nodes}))
    sizes = outside_use.pool_sizes(
        gpu_nodes,
        reading.pods,
        tenant_namespaces=reading.namespaces.keys(),
        system_namespaces=system_namespaces(),
    )
    with transaction.atomic():
        cluster, _ = Cluster.objects.select_for_update().get_or_create(name=cluster_name)
        known = {n.name: n for n in Node.objects.filter(cluster=cluster)}
        for info in gpu_nodes:
            values = {f: getattr(info, f) for f in NODE_FIELDS}
            row = known.pop(info.name, None)
            if row is None:
                Node.objects.create(cluster=cluster, name=info.name, last_seen_at=now, **values)
                result.added.append(info.name)
                continue
            if any(getattr(row, f) != v for f, v in values.items()):
                result.updated.append(info.name)
            for f, v in values.items():
                setattr(row, f, v)
            row.last_seen_at = now
            row.save()
        for name, row in known.items():
            row.delete()
            result.removed.append(name)
        # Pools in a fixed order, as approvals lock them: no deadlock with a racing approval.
        for pool in (
            Pool.objects.select_for_update()
            .select_related("resource_class")
            .order_by("resource_class_id")
        ):
            size = sizes.get(pool.resource_class.slug, outside_use.PoolSize(0))
            after = {
                "capacity": size.capacity,
                "source": Pool.Source.CLUSTER,
                "outside_use": size.outside_units,
                "outside_namespaces": size.outside,
            }
            before = {f: getattr(pool, f) for f in POOL_SYNCED_FIELDS}
            if before == after:
                continue
            result.pools_changed[pool.resource_class.slug] = (pool.capacity, size.capacity)
            for f, v in after.items():
                setattr(pool, f, v)
            pool.save(update_fields=[*POOL_SYNCED_FIELDS, "updated_at"])
            # Grants already made stand when outside use grows past what was free: the
            # console warns of the shortfall (tenants.selectors.PoolLine.shortfall).
            audit.record(
                actor=None, verb="pool.synced", obj=pool, tenant=None, before=before, after=after
            )
        _sync_allocations(cluster, reading.pods, reading.namespaces, now)
        cluster.last_sync_at = now
        cluster.last_sync_error = ""
        cluster.api_server = reading.api_server
        cluster.server_version = reading.server_version
        cluster.save()
    return result


def _sync_allocations(
    cluster: Cluster, pods: list[node_offers.PodInfo], namespaces: dict[str, str | None], now
) -> None:
    """Mirror which pods hold GPUs where (for the capacity map and metering)."""
    tenants = dict(Tenant.objects.values_list("slug", "pk"))
    seen = set()
    for pod in pods:
        seen.add(pod.uid)
        PodAllocation.objects.update_or_create(
            cluster=cluster,
            uid=pod.uid,
            defaults={
                "namespace": pod.namespace,
                "pod_name": pod.name,
                "node_name": pod.node_name,
                "tenant_id": tenants.get(namespaces.get(pod.namespace) or ""),
                "resources": pod.resources,
                "phase": pod.phase,
                "priority_class": pod.priority_class,
                "started_at": parse_datetime(pod.started_at) if pod.started_at else None,
                "seen_at": now,
            },
        )
    PodAllocation.objects.filter(cluster=cluster).exclude(uid__in=seen).delete()


def record_inventory_error(error: Exception, *, cluster_name: str = "local") -> None:
    Cluster.objects.update_or_create(
        name=cluster_name, defaults={"last_sync_error": str(error)[:2000]}
    )


def archive_cluster(*, actor, cluster: Cluster) -> Cluster:
    """Mark a cluster the portal no longer manages; its rows stay for billing history (the
    database refuses to delete a cluster that usage points at). One audit event."""
    require_platform_admin(actor, "archive clusters")
    with transaction.atomic():
        locked = Cluster.objects.select_for_update().get(pk=cluster.pk)
        if locked.archived_at is not None:
            raise InvalidTransition(f"cluster {locked.name} is already archived")
        locked.archived_at = timezone.now()
        locked.save(update_fields=["archived_at"])
        audit.record(
            actor=actor,
            verb="cluster.archived",
            obj=locked,
            tenant=None,
            after={"name": locked.name, "archived_at": locked.archived_at.isoformat()},
        )
    return locked
