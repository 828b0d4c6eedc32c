"""Thin tasks of the cluster door: load ids, call the reconciler or the inventory sync; safe to
run twice or concurrently. Task names stay `scheduler.tasks.*` so queued messages and the beat
schedule keep working across the move."""

from core.errors import ClusterError
from core.tasks import portal_task
from scheduler.cluster import inventory, kube, queues
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
