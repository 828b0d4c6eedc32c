"""Thin tasks: load ids, call the reconciler, safe to run twice or concurrently."""

from portal.tasks import portal_task
from scheduler import kube, reconcile


@portal_task(name="scheduler.tasks.reconcile_tenant")
def reconcile_tenant(*, tenant_id: int) -> str:
    run = reconcile.reconcile_tenant(kube.gateway(), tenant_id)
    return run.status if run else "no such tenant"


@portal_task(name="scheduler.tasks.reconcile_all")
def reconcile_all() -> dict:
    summary = reconcile.reconcile_all(kube.gateway())
    return {
        "tenants": summary.tenants,
        "changed": summary.changed,
        "drifted": summary.drifted,
        "failed": len(summary.failed),
        "skipped_busy": summary.skipped_busy,
    }


@portal_task(name="scheduler.tasks.sync_inventory")
def sync_inventory() -> dict:
    from scheduler import services
    from scheduler.errors import ClusterError

    try:
        result = services.sync_inventory(kube.gateway())
    except ClusterError as exc:
        services.record_inventory_error(exc)
        raise
    return {
        "added": result.added,
        "removed": result.removed,
        "updated": result.updated,
        "pools_changed": {k: list(v) for k, v in result.pools_changed.items()},
    }


# --- workloads (issue 5) ------------------------------------------------------------------------


@portal_task(name="scheduler.tasks.create_workload")
def create_workload(*, workload_id: int) -> str:
    from scheduler import workloads

    workload = workloads.create_in_cluster(kube.gateway(), workload_id)
    return workload.state if workload else "no such workload"


@portal_task(name="scheduler.tasks.delete_workload")
def delete_workload(*, workload_id: int) -> bool:
    from scheduler import workloads

    return workloads.delete_from_cluster(kube.gateway(), workload_id)


@portal_task(name="scheduler.tasks.sync_workloads")
def sync_workloads() -> int:
    from scheduler import workloads

    return workloads.sync_live_workloads(kube.gateway())
