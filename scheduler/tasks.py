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


# --- MIG planning (issue 8) ---------------------------------------------------------------------


@portal_task(name="scheduler.tasks.apply_plan", soft_time_limit=540, time_limit=600)
def apply_plan(*, plan_id: int, nodes: list[str] | None = None, actor_id: int | None = None) -> str:
    """Roll a plan out; a plan already applied (or being applied) is left alone, unless its
    rollout is stuck (its worker died): then it resumes where it stopped. Limits stay under the
    broker's visibility timeout."""
    from django.contrib.auth import get_user_model

    from scheduler import rollout
    from scheduler.models import Plan

    plan = Plan.objects.filter(pk=plan_id).first()
    if plan is None:
        return "no such plan"
    if plan.status == Plan.Status.APPLYING and not plan.is_stuck():
        return plan.status  # another worker is on it
    if plan.status == Plan.Status.APPLIED and not nodes:
        return plan.status
    actor = get_user_model().objects.filter(pk=actor_id).first() if actor_id else None
    return rollout.apply_plan(kube.gateway(), plan_id, actor=actor, nodes=nodes).status
