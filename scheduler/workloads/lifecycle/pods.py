"""A workload's pods as its page lists them: each with its index in a gang, its node and its state
in words. `pod_rows` is pure; `workload_pod_rows` reads the live pods through the one door."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from catalog import dra_devices
from core.errors import ClusterError, ServiceError
from scheduler.cluster import node_offers
from scheduler.cluster.kube import KubeGateway, gateway
from scheduler.cluster.models import SIMULATED_LABEL, Node
from scheduler.workloads.kinds import topology
from scheduler.workloads.kinds.gang import INDEX_ANNOTATION
from scheduler.workloads.kinds.manifests import KUEUE_GATE
from scheduler.workloads.lifecycle import placed
from scheduler.workloads.lifecycle.sync import workload_pods
from scheduler.workloads.models import Workload
from tenants.permissions import READ_ROLES, require_role

# What a pod on a simulated node means, said wherever it shows (its pods, its logs).
SIMULATED = (
    "a simulated node (the local cluster's KWOK) runs no container, so there are no logs, and "
    "its pods run until the workload is cancelled or stopped at its maximum run time; on a real "
    "node the logs show here"
)


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
    simulated: bool = False  # on a simulated node: no container, no logs, runs until stopped
    devices: str = ""  # DRA: the GPU and MIG placement its claims got ("gpu-0: 3g.20gb at 4")


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
            # the scheduler's own words where it gave some: which nodes it tried and why none
            # fits (taints, selectors, a DRA claim it could not allocate, a node gone)
            said = f"{phase}: {condition.get('reason') or 'not scheduled'}"
            message = (condition.get("message") or "").strip()
            return f"{said}: {message}" if message else said
    return phase


def devices_in_words(devices: tuple[str, ...]) -> str:
    """`gpu-0-mig-3g40gb-9-4` as `gpu-0: 3g.40gb at slice 4`, `gpu-1` as `gpu-1: whole GPU`."""
    words = []
    for device in devices:
        profile = dra_devices.device_profile(device)
        gpu = dra_devices.device_gpu(device)
        if profile:
            words.append(f"{gpu}: {profile} at slice {device.rsplit('-', 1)[1]}")
        else:
            words.append(f"{gpu}: whole GPU" if profile == "" else device)
    return ", ".join(words)


def _order(row: PodRow) -> tuple:
    return (int(row.index) if row.index.isdigit() else -1, row.name)


def pod_rows(
    pods: list[dict],
    places: dict[str, str] | None = None,
    simulated: frozenset[str] = frozenset(),
    claims: dict[tuple[str, str], tuple[str, ...]] | None = None,
) -> list[PodRow]:
    """The pods in index order (a gang's master first), then by name, each with its node's
    place in the network from `places` (node -> "block / rack"): where a gang landed, whether
    its node is one of the `simulated`, and the devices its DRA claims got (`claims`, as
    node_offers.claim_devices reads them) (pure)."""
    places = places or {}
    claims = claims or {}
    rows = []
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName") or ""
        namespace = (p.get("metadata") or {}).get("namespace", "")
        devices = tuple(
            d for name in node_offers.pod_claim_names(p) for d in claims.get((namespace, name), ())
        )
        rows.append(
            PodRow(
                name=(p.get("metadata") or {}).get("name", ""),
                index=((p.get("metadata") or {}).get("annotations") or {}).get(
                    INDEX_ANNOTATION, ""
                ),
                node=node,
                state=_state(p),
                place=places.get(node, ""),
                simulated=node in simulated,
                devices=devices_in_words(devices),
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
        kube = placed.door_for(workload, kube or gateway())  # a worker's, when dispatched
        pods = workload_pods(kube, workload)
    except ClusterError as exc:
        raise PodsUnavailable(f"cannot list the pods of {workload.name}: {exc}") from exc
    names = {(p.get("spec") or {}).get("nodeName") for p in pods}
    nodes = _nodes(names)
    claims = {}
    if any((p.get("spec") or {}).get("resourceClaims") for p in pods):
        try:  # one list in the namespace, only for pods with claims
            claims = node_offers.claim_devices(kube.list("ResourceClaim", workload.namespace))
        except ClusterError:
            claims = {}  # the pods still show; their devices when the cluster answers
    return pod_rows(pods, _places(nodes), frozenset(n.name for n in nodes if n.simulated), claims)


def _nodes(names: set) -> list[Node]:
    return list(Node.objects.filter(name__in=[n for n in names if n], cluster__archived_at=None))


def _places(nodes: list[Node]) -> dict[str, str]:
    levels = settings.GPU_TOPOLOGY_LEVELS
    return {n.name: place for n in nodes if (place := topology.domain_of(n.labels or {}, levels))}


def node_places(names: set) -> dict[str, str]:
    """Each named node's block and rack, from the inventory's labels (no extra API call)."""
    return _places(_nodes(names))


def on_simulated_node(kube: KubeGateway, pod: dict) -> bool:
    """Whether the pod's node is simulated, as the node itself says (one GET; a node the
    portal cannot read is not called simulated)."""
    name = (pod.get("spec") or {}).get("nodeName") or ""
    try:
        node = kube.get("Node", name) if name else None
    except ClusterError:
        return False
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(SIMULATED_LABEL[0]) == SIMULATED_LABEL[1]
