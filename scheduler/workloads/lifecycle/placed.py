"""Where a workload runs in a fleet (issue 54): the worker MultiKueue dispatched it to, as its
Kueue Workload on the manager says (`status.clusterName` names the worker's MultiKueueCluster),
and the door through which its pods and logs are read there. On the manager a dispatched Job
has no pod: what runs, runs on the worker.
"""

from __future__ import annotations

from django.conf import settings

from core.errors import ClusterError
from scheduler.cluster import doors
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster
from scheduler.cluster.render.multikueue import cluster_object_name
from scheduler.workloads.models import Workload


def worker_of(queue_workload: dict | None, known: str = "") -> str:
    """The registered worker a Kueue Workload was dispatched to ("" for none, or for a
    MultiKueueCluster that is not one of this portal's workers)."""
    object_name = ((queue_workload or {}).get("status") or {}).get("clusterName") or ""
    if not object_name:
        return ""
    instance = settings.PORTAL_INSTANCE
    if known and cluster_object_name(instance, known) == object_name:
        return known  # the worker it was seen on already: no query on the follower's path
    for name in Cluster.objects.workers().values_list("name", flat=True):
        if cluster_object_name(instance, name) == object_name:
            return name
    return ""


def record(workload: Workload, worker: str) -> None:
    """Keep where it was dispatched (kept after it ends: its page and costs say where)."""
    if worker and workload.cluster != worker:
        Workload.objects.filter(pk=workload.pk).update(cluster=worker)
        workload.cluster = worker


def door_for(workload: Workload, home: KubeGateway) -> KubeGateway:
    """The door to the cluster where its pods are: its worker's, or `home`. Raises
    ClusterError (a worker whose credentials will not do, or no longer registered)."""
    return doors.door(workload.cluster) if workload.cluster else home


def pods_there(workload: Workload, list_pods) -> list[dict] | None:
    """Its pods on its worker (`list_pods(door)`), None when the worker does not answer: the
    caller keeps what the manager says (MultiKueue mirrors the Job's status there)."""
    try:
        return list_pods(doors.door(workload.cluster))
    except ClusterError:
        return None


def unanswered(workload: Workload, message: str) -> str:
    """Its state as the manager last mirrored it, said to be so while its worker is silent:
    MultiKueue requeues it if the worker stays lost past its `workerLostTimeout`."""
    said = f"worker {workload.cluster} does not answer: as MultiKueue last mirrored it"
    return f"{message} ({said})" if message else said
