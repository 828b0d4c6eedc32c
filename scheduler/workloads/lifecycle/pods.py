"""A workload's pods as its page lists them: each with its index in a gang, its node and its state
in words. `pod_rows` is pure; `workload_pod_rows` reads the live pods through the one door."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from core.errors import ClusterError, ServiceError
from scheduler.cluster.kube import KubeGateway, gateway
from scheduler.cluster.models import Node
from scheduler.workloads.kinds import topology
from scheduler.workloads.kinds.gang import INDEX_ANNOTATION
from scheduler.workloads.kinds.manifests import KUEUE_GATE
from scheduler.workloads.lifecycle.sync import workload_pods
from scheduler.workloads.models import Workload
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
    place: str = ""  # its node's block and rack, "block-a / rack-a1" ("" unknown or unplaced)


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


def pod_rows(pods: list[dict], places: dict[str, str] | None = None) -> list[PodRow]:
    """The pods in index order (a gang's master first), then by name, each with its node's
    place in the network from `places` (node -> "block / rack"): where a gang landed (pure)."""
    places = places or {}
    rows = []
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName") or ""
        rows.append(
            PodRow(
                name=(p.get("metadata") or {}).get("name", ""),
                index=((p.get("metadata") or {}).get("annotations") or {}).get(
                    INDEX_ANNOTATION, ""
                ),
                node=node,
                state=_state(p),
                place=places.get(node, ""),
            )
        )
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
        pods = workload_pods(kube or gateway(), workload)
    except ClusterError as exc:
        raise PodsUnavailable(f"cannot list the pods of {workload.name}: {exc}") from exc
    return pod_rows(pods, node_places({(p.get("spec") or {}).get("nodeName") for p in pods}))


def node_places(names: set) -> dict[str, str]:
    """Each named node's block and rack, from the inventory's labels (no extra API call)."""
    levels = settings.GPU_TOPOLOGY_LEVELS
    nodes = Node.objects.filter(name__in=[n for n in names if n], cluster__archived_at=None)
    return {n.name: place for n in nodes if (place := topology.domain_of(n.labels or {}, levels))}
