"""Celery finds an app's tasks here; each lives with its concept."""

from scheduler.cluster.tasks import reconcile_all, reconcile_tenant, sync_inventory, sync_queues
from scheduler.health.tasks import check_gpu_health, enforce_gpu_health
from scheduler.mig.tasks import apply_plan, follow_queue_layouts, resume_stuck_rollouts
from scheduler.workloads.lifecycle.leftovers import delete_leftover_workloads
from scheduler.workloads.queue.overquota import stop_work_over_quota_task
from scheduler.workloads.queue.reclaim import reclaim_borrowed_units_task
from scheduler.workloads.tasks import create_workload, delete_workload, sync_workloads

__all__ = [
    "apply_plan",
    "check_gpu_health",
    "create_workload",
    "delete_leftover_workloads",
    "delete_workload",
    "enforce_gpu_health",
    "follow_queue_layouts",
    "reconcile_all",
    "reconcile_tenant",
    "resume_stuck_rollouts",
    "reclaim_borrowed_units_task",
    "stop_work_over_quota_task",
    "sync_inventory",
    "sync_queues",
    "sync_workloads",
]
