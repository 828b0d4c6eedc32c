"""A workload's pods as its page lists them: each with its index in a gang, its node and its state
in words. `pod_rows` is pure; `workload_pod_rows` reads the live pods through the one door."""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ClusterError, ServiceError
from scheduler.cluster.kube import KubeGateway, gateway
from scheduler.workloads.gang import INDEX_ANNOTATION
from scheduler.workloads.manifests import KUEUE_GATE
from scheduler.workloads.models import Workload
from scheduler.workloads.sync import workload_pods
from tenants.permissions import READ_ROLES, require_role


class PodsUnavailable(ServiceError):
    code = "pods_unavailable"
    status = 409


@dataclass(frozen=True)
class PodRow:
    name: str
    index: str  # a gang's pod: its rank ("0" is the master); "" otherwise
    node: str  # "" while not placed
    state: str  # in words: "Running", "Pending: waiting in the team's queue", ...


def _state(pod: dict) -> str:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if meta.get("deletionTimestamp"):
        return f"{phase}, stopping"
    if any(g.get("name") == KUEUE_GATE for g in spec.get("schedulingGates") or []):
        return "Pending: waiting in the team's queue"
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return f"{phase}: {waiting['reason']}"
        done = (container.get("state") or {}).get("terminated") or {}
        if done and done.get("exitCode"):
            return f"{phase}: exited with code {done['exitCode']}"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{phase}: {condition.get('reason') or 'not scheduled'}"
    return phase


def _order(row: PodRow) -> tuple:
    return (int(row.index) if row.index.isdigit() else -1, row.name)


def pod_rows(pods: list[dict]) -> list[PodRow]:
    """The pods in index order (a gang's master first), then by name (pure)."""
    rows = [
        PodRow(
            name=(p.get("metadata") or {}).get("name", ""),
            index=((p.get("metadata") or {}).get("annotations") or {}).get(INDEX_ANNOTATION, ""),
            node=(p.get("spec") or {}).get("nodeName") or "",
            state=_state(p),
        )
        for p in pods
    ]
    return sorted(rows, key=_order)


def workload_pod_rows(
    kube: KubeGateway | None = None, *, actor, workload: Workload
) -> list[PodRow]:
    """The workload's live pods; 409 with the reason where the cluster cannot say (not created
    yet, no cluster configured, the API server down), never a 500."""
    require_role(actor, workload.tenant, READ_ROLES, "see pods")
    if workload.cluster_created_at is None:
        raise PodsUnavailable(f"workload {workload.name} is not on the cluster yet")
    try:
        return pod_rows(workload_pods(kube or gateway(), workload))
    except ClusterError as exc:
        raise PodsUnavailable(f"cannot list the pods of {workload.name}: {exc}") from exc
