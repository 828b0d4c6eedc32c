"""Thin tasks of the cluster door: load ids, call the reconciler or the inventory sync; safe to
run twice or concurrently. Task names stay `scheduler.tasks.*` so queued messages and the beat
schedule keep working across the move."""

from core.errors import ClusterError
from core.tasks import portal_task
from scheduler.cluster import inventory, kube, queues
from scheduler.cluster.reconcile import runs
from scheduler.cluster.reconcile.converge import managed_selector


@portal_task(name="scheduler.tasks.reconcile_tenant")
def reconcile_tenant(*, tenant_id: int) -> str:
    run = runs.reconcile_tenant(kube.gateway(), tenant_id)
    return run.status if run else "no such tenant"


@portal_task(name="scheduler.tasks.reconcile_all")
def reconcile_all() -> dict:
    summary = runs.reconcile_all(kube.gateway())
    return {
        "tenants": summary.tenants,
        "changed": summary.changed,
        "drifted": summary.drifted,
        "failed": len(summary.failed),
        "skipped_busy": summary.skipped_busy,
    }


@portal_task(name="scheduler.tasks.sync_inventory")
def sync_inventory() -> dict:
    try:
        result = inventory.sync_inventory(kube.gateway())
    except ClusterError as exc:
        inventory.record_inventory_error(exc)
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
