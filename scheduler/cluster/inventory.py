"""Inventory: what each cluster has (nodes, GPUs, the GPU pods on them) read into PostgreSQL under
its Cluster row, and the pools' capacity derived from it (in a fleet: summed over the active
clusters, each as last read); and archiving a cluster the portal no longer manages."""

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
from core.errors import ClusterError, InvalidTransition
from core.permissions import require_platform_admin
from scheduler.cluster import node_offers, outside_use
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import DEFAULT_CLUSTER, Cluster, Node, PodAllocation
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


def sync_inventory(kube: KubeGateway, *, cluster_name: str = DEFAULT_CLUSTER) -> InventorySync:
    """Mirror the cluster's GPU nodes into the inventory and set every pool's capacity from
    them, less what pods outside the teams hold. Idempotent; a pool whose capacity or outside
    use changes gets one audit event. Every call to the API server happens before the
    transaction (`read_cluster`): approvals never wait on the cluster for a pool lock."""
    return record_inventory(read_cluster(kube), cluster_name=cluster_name)


POOL_SYNCED_FIELDS = ("capacity", "source", "outside_use", "outside_namespaces")


def record_inventory(
    reading: ClusterReading, *, cluster_name: str = DEFAULT_CLUSTER
) -> InventorySync:
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
        # Pools in a fixed order, as approvals lock them: no deadlock with a racing approval.
        # Every cluster's sync locks them, so the other clusters' rows read below are those
        # their last sync committed.
        pools = list(
            Pool.objects.select_for_update()
            .select_related("resource_class")
            .order_by("resource_class_id")
        )
        others = _stored_sizes(exclude=cluster.pk)
        if others:  # a fleet: the pools hold what every active cluster offers
            sizes = add_sizes({cluster.name: sizes, **others})
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
        for pool in pools:
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


def record_inventory_error(error: Exception, *, cluster_name: str = DEFAULT_CLUSTER) -> None:
    """A sync that could not read the cluster: said on its page; its rows stay as last read."""
    if cluster_name == DEFAULT_CLUSTER:
        Cluster.objects.update_or_create(
            name=cluster_name, defaults={"last_sync_error": str(error)[:2000]}
        )
    else:  # a registered cluster's row is the platform team's: never made here
        Cluster.objects.filter(name=cluster_name).update(last_sync_error=str(error)[:2000])


# --- a fleet: the pools summed over the clusters -----------------------------------------------


def node_of_row(row: Node) -> node_offers.NodeInfo:
    """A node as its last sync read it, from its row (pure): what it offers is derived again
    from what the row keeps, as `node_offers.parse_node` derived it."""
    if row.mig_strategy == node_offers.DRA:
        units = node_offers.dra_units(row.gpu_model, row.gpu_count)
    elif row.mig_strategy == node_offers.DRA_UNPUBLISHED:
        units = {}
    else:
        units = node_offers.class_units(
            row.gpu_model, row.allocatable or {}, row.sharing_strategy, row.gpu_product
        )
    return node_offers.NodeInfo(
        **{f: getattr(row, f) for f in NODE_FIELDS},
        name=row.name,
        units=units,
        health_tainted=node_offers.HEALTH_TAINT_KEY in (row.taints or []),
    )


def pod_of_row(row: PodAllocation) -> node_offers.PodInfo:
    return node_offers.PodInfo(
        uid=row.uid,
        namespace=row.namespace,
        name=row.pod_name,
        node_name=row.node_name,
        resources=row.resources or {},
        phase=row.phase,
        priority_class=row.priority_class,
        started_at=None,
    )


def add_sizes(
    by_cluster: dict[str, dict[str, outside_use.PoolSize]],
) -> dict[str, outside_use.PoolSize]:
    """The fleet's pools (pure): what each cluster's nodes offer, added; the namespaces that
    hold units outside the teams said as `cluster/namespace`."""
    offered: dict[str, int] = {}
    outside: dict[str, dict[str, int]] = {}
    for name in sorted(by_cluster):
        for slug, size in by_cluster[name].items():
            offered[slug] = offered.get(slug, 0) + size.offered
            held = outside.setdefault(slug, {})
            for namespace, units in size.outside.items():
                held[f"{name}/{namespace}"] = units
    return {
        slug: outside_use.PoolSize(offered[slug], dict(sorted(outside[slug].items())))
        for slug in sorted(offered)
    }


def _stored_sizes(*, exclude: int) -> dict[str, dict[str, outside_use.PoolSize]]:
    """Every other active cluster's pools as its last sync left its rows (three queries); {}
    for a single-cluster install. A team's namespace is one whose pods the sync gave a team."""
    clusters = dict(Cluster.objects.active().exclude(pk=exclude).values_list("pk", "name"))
    if not clusters:
        return {}
    nodes: dict[int, list[node_offers.NodeInfo]] = {pk: [] for pk in clusters}
    for row in Node.objects.filter(cluster_id__in=clusters):
        nodes[row.cluster_id].append(node_of_row(row))
    pods: dict[int, list[PodAllocation]] = {pk: [] for pk in clusters}
    for pod in PodAllocation.objects.filter(cluster_id__in=clusters):
        pods[pod.cluster_id].append(pod)
    system = system_namespaces()
    return {
        name: outside_use.pool_sizes(
            nodes[pk],
            [pod_of_row(p) for p in pods[pk]],
            tenant_namespaces={p.namespace for p in pods[pk] if p.tenant_id},
            system_namespaces=system,
        )
        for pk, name in clusters.items()
    }


@dataclass(frozen=True)
class ClusterSync:
    """One cluster's part of a fleet's inventory sync: what changed, or why it was not read."""

    cluster: str
    result: InventorySync | None = None
    error: str = ""


def sync_cluster(cluster_name: str, gateway_of) -> ClusterSync:
    """Read one registered cluster through its door (`gateway_of(name)`, doors.door) and record
    it; a cluster that cannot be read (down, credentials refused) has its error recorded on its
    row, and its rows stay as last read. Never raises a cluster's error: the others go on."""
    try:
        reading = read_cluster(gateway_of(cluster_name))
    except ClusterError as exc:
        record_inventory_error(exc, cluster_name=cluster_name)
        return ClusterSync(cluster_name, error=str(exc))
    return ClusterSync(cluster_name, result=record_inventory(reading, cluster_name=cluster_name))


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
