"""The periodic GPU health check, and the nudge after an acknowledgement."""

from core.tasks import portal_task
from scheduler.cluster import kube
from scheduler.cluster.models import Cluster
from scheduler.health import sweep, taints


@portal_task(name="scheduler.tasks.check_gpu_health")
def check_gpu_health() -> dict:
    result = sweep.check_health(kube.gateway())
    return {
        "unknown": result.unknown,
        "opened": len(result.opened),
        "closed": len(result.closed),
        "tainted": result.tainted,
        "untainted": result.untainted,
        "evicted": len(result.evicted),
        "blocked": result.blocked,
    }


@portal_task(name="scheduler.tasks.enforce_gpu_health")
def enforce_gpu_health() -> dict:
    """Taints in line with the events now (after an acknowledgement), without waiting for the
    next check; the check does the same anyway."""
    cluster = Cluster.objects.filter(name="local").first()
    if cluster is None:
        return {}
    result = taints.enforce(kube.gateway(), cluster)
    return {"tainted": result.tainted, "untainted": result.untainted}
