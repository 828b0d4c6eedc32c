"""Thin tasks that follow workloads on the cluster; safe to run twice or concurrently."""

from core.tasks import portal_task
from scheduler.cluster import kube
from scheduler.workloads.lifecycle import sync, watching


@portal_task(name="scheduler.tasks.create_workload")
def create_workload(*, workload_id: int) -> str:
    workload = sync.create_in_cluster(kube.gateway(), workload_id)
    return workload.state if workload else "no such workload"


@portal_task(name="scheduler.tasks.delete_workload")
def delete_workload(*, workload_id: int) -> bool:
    return sync.delete_from_cluster(kube.gateway(), workload_id)


@portal_task(name="scheduler.tasks.sync_workloads")
def sync_workloads() -> int:
    # Change-driven (watch cursors in PostgreSQL), a full resync now and then; a run that finds
    # another one running skips, so beat may send it while the last one is still going.
    return watching.sync_live_workloads(kube.gateway())
