"""A workload's logs: those of its newest pod, where the cluster serves them (simulated nodes
have no containers and so no logs)."""

from __future__ import annotations

from core.errors import ClusterError, ServiceError
from scheduler.cluster.kube import KubeGateway, gateway
from scheduler.workloads.lifecycle import placed
from scheduler.workloads.lifecycle.pods import SIMULATED, on_simulated_node
from scheduler.workloads.lifecycle.sync import workload_pods
from scheduler.workloads.models import Workload
from tenants.permissions import READ_ROLES, require_role


class LogsUnavailable(ServiceError):
    code = "logs_unavailable"
    status = 409


def workload_logs(
    kube: KubeGateway | None = None, *, actor, workload: Workload, tail_lines: int = 500
) -> tuple[str, str]:
    """(pod name, log) of the newest pod, where the cluster serves logs. Without a gateway, the
    configured cluster's, reached only once the workload is there: a portal with no cluster
    configured answers 409 with the reason, never a 500."""
    require_role(actor, workload.tenant, READ_ROLES, "read logs")
    if workload.cluster_created_at is None:
        raise LogsUnavailable(f"workload {workload.name} is not on the cluster yet")
    try:
        kube = placed.door_for(workload, kube or gateway())  # a worker's, when dispatched
        pods = workload_pods(kube, workload)
    except ClusterError as exc:
        raise LogsUnavailable(f"cannot list the pods of {workload.name}: {exc}") from exc
    if not pods:
        raise LogsUnavailable(f"workload {workload.name} has no pod (any more)")
    pod = pods[0]["metadata"]["name"]
    try:
        return pod, kube.pod_log(pod, workload.namespace, tail_lines=tail_lines)
    except ClusterError as exc:
        if on_simulated_node(kube, pods[0]):  # asked only when there is no log to show
            raise LogsUnavailable(f"pod {pod} runs on a simulated node: {SIMULATED}") from exc
        raise LogsUnavailable(
            f"the cluster does not serve the logs of pod {pod} ({exc}); simulated nodes have no "
            "containers and so no logs"
        ) from exc
