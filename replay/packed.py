"""The vocabulary of static packing: what a drawn pod asks, and the fleet being packed.

Shared by the MIG-only methods (`replay.packing`) and the mixed planner (`replay.mixed`). The
fleet keeps the trace's model structure: every node keeps its trace model (P100, T4, V100M16,
G2, ...), and a pod's `gpu_spec` (`TracePod.models`) is checked against it, so a pod pinned to a
model never lands on another. Each trace model is re-imagined as one catalog model
(`model_map`); the catalog model decides only a GPU's MIG geometry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from replay.trace import TraceNode, TracePod

WHOLE_ASK = "whole"  # Ask.profile of a whole-GPU ask; PackedGpu.pods label of a pod holding it
SHARED = "shared"  # PackedGpu.pods label of a pod on a replica of a shared GPU


@dataclass(frozen=True)
class Ask:
    """What one drawn pod needs on a MIG-only fleet: `gpus` whole GPUs (profile `whole`), or
    one MIG instance."""

    profile: str
    gpus: int = 1

    @property
    def whole(self) -> bool:
        return self.profile == WHOLE_ASK


@dataclass(frozen=True)
class DrawnPod:
    position: int  # arrival order, 0-based
    pod: TracePod
    ask: Ask


@dataclass
class PackedGpu:
    """One GPU of the fleet after packing: `whole`, `mig` with `layout` (profile -> instances),
    or `shared` with one replica per pod, sized to its milli (`replicas`)."""

    node: str
    index: int
    mode: str = "whole"
    layout: Counter[str] = field(default_factory=Counter)
    pods: list[tuple[int, str]] = field(default_factory=list)  # (position, profile, whole, shared)
    replicas: list[int] = field(default_factory=list)  # milli of each replica, when shared

    def used(self) -> Counter[str]:
        return Counter(profile for _, profile in self.pods)


Packed = tuple[list[PackedGpu], dict[int, list[int]], list[str]]  # fleet, placements, notes


def empty_fleet(nodes: Iterable[TraceNode]) -> list[PackedGpu]:
    """Every GPU of the trace's nodes, whole, in node file order."""
    return [PackedGpu(n.name, i) for n in nodes for i in range(n.gpus)]


def model_map(nodes: Iterable[TraceNode], catalog_model: str) -> dict[str, str]:
    """Each trace model of the fleet -> the catalog model it is re-imagined as. One catalog
    model for all: the trace's models are not MIG-capable, and the catalog has no model of
    theirs, so any choice is counterfactual; one MIG geometry keeps the comparison to the
    published rows about packing, not about the models. The node's trace model still decides
    which pods it may take."""
    return dict.fromkeys(sorted({n.model for n in nodes if n.gpus}), catalog_model)


class Packing:
    """A fleet being packed: GPUs in node file order, each node's trace model, and the CPU and
    memory each node has left (checked only with `node_limits`, as the paper's simulator
    checks them)."""

    def __init__(self, nodes: Sequence[TraceNode], node_limits: bool) -> None:
        gpu_nodes = [n for n in nodes if n.gpus]
        self.fleet = empty_fleet(gpu_nodes)
        self.spans: list[range] = []  # node -> its GPUs' positions in the fleet
        self.node_of: list[int] = []  # GPU position -> node
        for node, n in enumerate(gpu_nodes):
            self.spans.append(range(len(self.node_of), len(self.node_of) + n.gpus))
            self.node_of += [node] * n.gpus
        self.models = [n.model for n in gpu_nodes]
        self.cpu = [n.cpu_milli for n in gpu_nodes]
        self.memory = [n.memory_mib for n in gpu_nodes]
        self.node_limits = node_limits
        self.placements: dict[int, list[int]] = {}
        self.empty_gpus = [len(span) for span in self.spans]  # node -> GPUs holding no pod
        # nodes by how many empty GPUs they have; a shelf in the order nodes came onto it
        self.by_empty: list[dict[int, None]] = [
            {} for _ in range(max(self.empty_gpus, default=0) + 1)
        ]
        for node, empty in enumerate(self.empty_gpus):
            self.by_empty[empty][node] = None

    def allows(self, node: int, pod: DrawnPod) -> bool:
        """The pod's `gpu_spec` allows the node's trace model (no spec: any model)."""
        models = pod.pod.models
        return not models or self.models[node] in models

    def room(self, node: int, pod: DrawnPod) -> bool:
        """The node may take the pod: its model is allowed and its CPU and memory are left."""
        return self.allows(node, pod) and (
            not self.node_limits
            or (self.cpu[node] >= pod.pod.cpu_milli and self.memory[node] >= pod.pod.memory_mib)
        )

    def empty_whole(self, gid: int) -> bool:
        return self.fleet[gid].mode == "whole" and not self.fleet[gid].pods

    def place(self, gids: list[int], pod: DrawnPod, label: str | None = None) -> None:
        node = self.node_of[gids[0]]
        self.cpu[node] -= pod.pod.cpu_milli
        self.memory[node] -= pod.pod.memory_mib
        for gid in gids:
            if not self.fleet[gid].pods:
                del self.by_empty[self.empty_gpus[node]][node]
                self.empty_gpus[node] -= 1
                self.by_empty[self.empty_gpus[node]][node] = None
            self.fleet[gid].pods.append((pod.position, label or pod.ask.profile))
        self.placements[pod.position] = list(gids)

    def place_cpu_only(self, pod: DrawnPod) -> int | None:
        """A pod that asks no GPU (the trace's CPU-only pods) takes, of the nodes with room that
        have the fewest empty GPUs, the one with the most CPU left (then file order): CPU where
        the GPUs are already taken strands the fewest of them. Returns the node, or None."""
        for shelf in self.by_empty:
            fits = [n for n in shelf if self.room(n, pod)]
            if fits:
                node = min(fits, key=lambda n: (-self.cpu[n], n))
                break
        else:
            return None
        self.cpu[node] -= pod.pod.cpu_milli
        self.memory[node] -= pod.pod.memory_mib
        self.placements[pod.position] = []
        return node

    def place_whole(self, pod: DrawnPod, nodes: Iterable[int]) -> int | None:
        """On the first of `nodes` with room and enough empty whole GPUs, the pod takes the
        first ones; returns that node, or None."""
        for node in nodes:
            span = self.spans[node]
            if len(span) < pod.ask.gpus or not self.room(node, pod):
                continue
            free = [gid for gid in span if self.empty_whole(gid)]
            if len(free) >= pod.ask.gpus:
                self.place(free[: pod.ask.gpus], pod)
                return node
        return None

    def packed(self, notes: list[str]) -> Packed:
        return self.fleet, self.placements, notes
