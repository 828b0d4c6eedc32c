"""Thin tasks of workspaces; safe to run twice or concurrently."""

from core.tasks import portal_task
from scheduler.cluster import kube
from workspaces import culling, sync


@portal_task(name="scheduler.tasks.apply_workspace")
def apply_workspace(*, workspace_id: int) -> list[str]:
    return sync.apply_objects(kube.gateway(), workspace_id)


@portal_task(name="scheduler.tasks.cull_workspaces")
def cull_workspaces() -> dict:
    result = culling.cull_workspaces(kube.gateway())
    return {"looked": result.looked, "warned": result.warned, "stopped": result.stopped}
