"""Thin tasks of the cluster door: load ids, call the reconciler, the inventory sync or the
fleet's health checks; safe to run twice or concurrently. Task names stay `scheduler.tasks.*`
so queued messages and the beat schedule keep working across the move."""

import logging

from core.errors import ClusterError
from core.tasks import portal_task
from scheduler.cluster import doors, fleet, inventory, kube, queues
from scheduler.cluster.models import Cluster
from scheduler.cluster.reconcile import runs, workers
from scheduler.cluster.reconcile.converge import managed_selector


@portal_task(name="scheduler.tasks.reconcile_tenant")
def reconcile_tenant(*, tenant_id: int) -> str:
    run = runs.reconcile_tenant(kube.gateway(), tenant_id)
    # then the team on the fleet's workers (nothing on a single cluster)
    workers.reconcile_fleet(kube.gateway(), tenant_ids={tenant_id}, trigger="tenant change")
    return run.status if run else "no such tenant"


@portal_task(name="scheduler.tasks.reconcile_all")
def reconcile_all() -> dict:
    summary = runs.reconcile_all(kube.gateway())
    problems = workers.reconcile_fleet(kube.gateway())  # every worker (none: a single cluster)
    return {
        "workers_failed": len(problems),
        "tenants": summary.tenants,
        "changed": summary.changed,
        "drifted": summary.drifted,
        "failed": len(summary.failed),
        "skipped_busy": summary.skipped_busy,
    }


log = logging.getLogger(__name__)


@portal_task(name="scheduler.tasks.sync_inventory")
def sync_inventory() -> dict:
    """The portal's own cluster, as ever; each worker of a fleet in a task of its own (one that
    is down delays no other, and this one's retries do not read the workers again)."""
    for cluster_id in Cluster.objects.workers().values_list("pk", flat=True):
        sync_cluster_inventory.delay(cluster_id=cluster_id)
    home = fleet.home_cluster_name()
    try:
        result = inventory.sync_inventory(kube.gateway(), cluster_name=home)
    except ClusterError as exc:
        inventory.record_inventory_error(exc, cluster_name=home)
        raise
    return {
        "added": result.added,
        "removed": result.removed,
        "updated": result.updated,
        "pools_changed": {k: list(v) for k, v in result.pools_changed.items()},
    }


@portal_task(name="scheduler.tasks.sync_queues")
def sync_queues() -> int:
    return queues.sync_queue_status(kube.gateway(), managed_selector())


@portal_task(name="scheduler.tasks.sync_cluster_inventory")
def sync_cluster_inventory(*, cluster_id: int) -> dict:
    """One worker's inventory through its door; its error is recorded on it, not raised."""
    cluster = Cluster.objects.active().filter(pk=cluster_id).first()
    if cluster is None:
        return {"cluster": None, "error": "not an active cluster"}
    done = inventory.sync_cluster(cluster.name, doors.door)
    if done.result is None:
        return {"cluster": cluster.name, "error": done.error}
    return {
        "cluster": cluster.name,
        "added": done.result.added,
        "removed": done.result.removed,
        "updated": done.result.updated,
    }


@portal_task(name="scheduler.tasks.check_clusters")
def check_clusters() -> dict:
    """Every active cluster's health (fleet.check_cluster), each on its own: what one answers,
    or fails to, stops no other. Cluster name -> "ok" or what to change."""
    return fleet.check_clusters()
