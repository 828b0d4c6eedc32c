"""The mixed mode of static packing: each GPU may be whole, MIG or shared.

Beside the MIG-only methods of `replay.packing`, where a fractional ask rounds up to a MIG
profile, here a fractional ask takes exactly its `gpu_milli` of one GPU, as the published rows
do, and each GPU ends in the most isolated mode that holds what was put on it:
- `whole`: one pod (a whole-GPU ask, one GPU of a multi-GPU ask, or a lone fractional ask,
  which then holds the whole GPU as nothing else came to share it);
- `mig`: two or more fractional pods whose profiles (the MIG-only rounding,
  `packing.profile_for_slices`) pack on the GPU's catalog model (`facts.can_pack`): isolation
  at no cost in what the GPU holds;
- `shared`: otherwise, one replica per pod sized to its milli (`PackedGpu.replicas`), as an MPS
  GPU would be configured with a per-client active-thread percentage. The NVIDIA device
  plugin's own time-slicing and MPS replicas are equal-sized and set per node, so replicas
  sized per pod, and MIG, shared and whole GPUs side by side on one node, are an assumption of
  this counterfactual fleet, like the MIG GPUs themselves.

Placement is best fit on GPU milli: a fractional pod takes the GPU with the least milli left that
still fits it; only when no used GPU fits does it open an empty one, on the node with the fewest
empty GPUs; a whole-GPU ask of k GPUs takes the node with the fewest empty GPUs that has k. Every
placement respects the node's CPU and memory (`node_limits`) and the pod's `gpu_spec`. Two orders:
- `mixed` (the mixed planner): the whole batch known at once (offline, like `planner`); it
  places the batch in each of a few orders (`OFFLINE_ORDERS`: largest first, so small asks
  fill the gaps the large ones leave; largest dominant share of GPU, CPU and memory first;
  arrival order) and keeps the plan that places the most milli;
- `online-best-fit`: arrival order, one pod at a time, the published best-fit's setting (online,
  fractional sharing): the like-for-like check of this harness against the published row.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Callable, Sequence

from catalog import facts
from replay.packed import SHARED, WHOLE_ASK, DrawnPod, Packed, Packing
from replay.trace import FULL_GPU_MILLI, TraceNode

MIXED_METHODS = ("mixed", "online-best-fit")


class _Shelves:
    """Where a pod may go, indexed per trace model: used GPUs by the milli they have left, and
    nodes by how many empty GPUs they have. A node that no drawn pod's CPU and memory fit any
    more leaves the shelves."""

    def __init__(self, packing: Packing, drawn: Sequence[DrawnPod]) -> None:
        self.packing = packing
        self.left = [FULL_GPU_MILLI] * len(packing.fleet)
        self.empty = [list(span) for span in packing.spans]  # node -> its empty GPUs, in order
        self.used: dict[str, dict[int, dict[int, None]]] = {}  # model -> milli left -> GPUs
        self.used_keys: dict[str, list[int]] = {}  # model -> sorted milli left, non-empty shelves
        self.nodes: dict[str, list[dict[int, None]]] = {}  # model -> empty GPUs -> nodes
        for node, span in enumerate(packing.spans):
            model = packing.models[node]
            self.used.setdefault(model, {})
            self.used_keys.setdefault(model, [])
            shelf = self.nodes.setdefault(model, [])
            while len(shelf) <= len(span):
                shelf.append({})
            shelf[len(span)][node] = None
        self.retired: set[int] = set()
        gpu_pods = [p for p in drawn if p.pod.num_gpu]
        self.least_cpu = min((p.pod.cpu_milli for p in gpu_pods), default=0)
        self.least_memory = min((p.pod.memory_mib for p in gpu_pods), default=0)

    def models_for(self, pod: DrawnPod) -> list[str]:
        allowed = pod.pod.models
        return [m for m in self.nodes if not allowed or m in allowed]

    def best_used(self, pod: DrawnPod) -> tuple[int, int] | None:
        """(milli left, GPU) of the used GPU with the least milli left that fits the pod."""
        best: tuple[int, int] | None = None
        milli = pod.pod.gpu_milli
        for model in self.models_for(pod):
            keys = self.used_keys[model]
            for left in keys[bisect_left(keys, milli) :]:
                if best is not None and left >= best[0]:
                    break
                gid = next(
                    (g for g in self.used[model][left] if self.packing.room(self.node(g), pod)),
                    None,
                )
                if gid is not None:
                    best = (left, gid)
                    break
        return best

    def best_node(self, pod: DrawnPod, gpus: int) -> int | None:
        """The node with the fewest empty GPUs, at least `gpus` of them, that may take the pod."""
        best: tuple[int, int] | None = None  # (empty GPUs, node)
        for model in self.models_for(pod):
            shelf = self.nodes[model]
            for count in range(gpus, len(shelf)):
                if best is not None and count >= best[0]:
                    break
                node = next((n for n in shelf[count] if self.packing.room(n, pod)), None)
                if node is not None:
                    best = (count, node)
                    break
        return None if best is None else best[1]

    def node(self, gid: int) -> int:
        return self.packing.node_of[gid]

    def _move_node(self, node: int, before: int, after: int) -> None:
        shelf = self.nodes[self.packing.models[node]]
        del shelf[before][node]
        shelf[after][node] = None

    def _shelve(self, gid: int, left: int | None) -> None:
        """Put a used GPU on the shelf of `left` milli (None: off every shelf)."""
        model = self.packing.models[self.node(gid)]
        old = self.left[gid]
        if old < FULL_GPU_MILLI:
            shelf = self.used[model][old]
            del shelf[gid]
            if not shelf:
                del self.used[model][old]
                self.used_keys[model].remove(old)
        if left:
            if left not in self.used[model]:
                self.used[model][left] = {}
                insort(self.used_keys[model], left)
            self.used[model][left][gid] = None

    def take(self, gids: list[int], milli: int) -> None:
        """`milli` of each of `gids` (all on one node) is taken."""
        node = self.node(gids[0])
        opened = [g for g in gids if self.left[g] == FULL_GPU_MILLI]
        if opened:
            before = len(self.empty[node])
            self.empty[node] = [g for g in self.empty[node] if g not in opened]
            self._move_node(node, before, len(self.empty[node]))
        for gid in gids:
            self._shelve(gid, self.left[gid] - milli)
            self.left[gid] -= milli
        self.retire_if_full(node)

    def retire_if_full(self, node: int) -> None:
        packing = self.packing
        if (
            node in self.retired
            or not packing.node_limits
            or (packing.cpu[node] >= self.least_cpu and packing.memory[node] >= self.least_memory)
        ):
            return
        self.retired.add(node)
        del self.nodes[packing.models[node]][len(self.empty[node])][node]
        for gid in packing.spans[node]:
            if 0 < self.left[gid] < FULL_GPU_MILLI:
                self._shelve(gid, None)
            self.left[gid] = 0  # nothing more goes here
        self.empty[node] = []


def _largest_first(drawn: Sequence[DrawnPod], nodes: Sequence[TraceNode]) -> list[DrawnPod]:
    """GPUs asked, then milli; among equals pods pinned to models first (they have fewer places
    to go), then arrival order."""
    return sorted(
        drawn, key=lambda p: (-p.pod.num_gpu, -p.pod.gpu_milli, not p.pod.models, p.position)
    )


def _dominant_first(drawn: Sequence[DrawnPod], nodes: Sequence[TraceNode]) -> list[DrawnPod]:
    """Largest first by the pod's dominant share: the most of GPUs, CPU and memory it asks,
    each over what the fleet has per GPU, so CPU- and memory-heavy pods go early too."""
    gpu_nodes = [n for n in nodes if n.gpus]
    gpus = sum(n.gpus for n in gpu_nodes)
    cpu = max(1.0, sum(n.cpu_milli for n in gpu_nodes) / gpus)
    memory = max(1.0, sum(n.memory_mib for n in gpu_nodes) / gpus)

    def share(p: DrawnPod) -> float:
        return max(
            p.pod.gpu_request_milli / FULL_GPU_MILLI,
            p.pod.cpu_milli / cpu,
            p.pod.memory_mib / memory,
        )

    return sorted(drawn, key=lambda p: (-share(p), not p.pod.models, p.position))


def _arrival(drawn: Sequence[DrawnPod], nodes: Sequence[TraceNode]) -> list[DrawnPod]:
    return list(drawn)


# The orders the mixed planner tries; it keeps the plan that places the most milli. Largest
# first wins when the batch asks more than the fleet has (small asks fill the gaps, the rest
# fail); at a load near 1 it can strand GPUs on nodes whose CPU went to large pods, where
# arrival order does better.
OFFLINE_ORDERS: dict[str, Callable[[Sequence[DrawnPod], Sequence[TraceNode]], list[DrawnPod]]] = {
    "largest first": _largest_first,
    "dominant share first": _dominant_first,
    "arrival order": _arrival,
}


def _place(
    order: Sequence[DrawnPod],
    drawn: Sequence[DrawnPod],
    nodes: Sequence[TraceNode],
    node_limits: bool,
) -> Packing:
    """Best fit of every pod in `order` that finds room (see the module doc); a CPU-only pod
    takes its place where the order puts it (`Packing.place_cpu_only`)."""
    packing = Packing(nodes, node_limits)
    shelves = _Shelves(packing, drawn)
    for pod in order:
        if not pod.pod.num_gpu:
            node = packing.place_cpu_only(pod)
            if node is not None:
                shelves.retire_if_full(node)
            continue
        whole = pod.pod.num_gpu > 1 or pod.pod.gpu_milli >= FULL_GPU_MILLI
        if whole:
            node = shelves.best_node(pod, pod.pod.num_gpu)
            if node is None:
                continue
            gids = shelves.empty[node][: pod.pod.num_gpu]
        else:
            used = shelves.best_used(pod)
            if used is not None:
                gids = [used[1]]
            else:
                node = shelves.best_node(pod, 1)
                if node is None:
                    continue
                gids = shelves.empty[node][:1]
        packing.place(gids, pod, WHOLE_ASK)
        shelves.take(gids, pod.pod.gpu_milli)
    return packing


def _placed_milli(packing: Packing, drawn: Sequence[DrawnPod]) -> int:
    return sum(drawn[position].pod.gpu_request_milli for position in packing.placements)


def pack_mixed(
    drawn: list[DrawnPod],
    nodes: Sequence[TraceNode],
    catalog: dict[str, facts.GpuModel],
    node_limits: bool = True,
    online: bool = False,
) -> Packed:
    """Place every pod it can, in arrival order (`online`) or, offline, in each of
    `OFFLINE_ORDERS`, keeping the plan with the most milli placed; then give each GPU its mode.
    `catalog`: trace model -> the catalog model its GPUs are re-imagined as (MIG geometry)."""
    if online:
        packing, notes = _place(drawn, drawn, nodes, node_limits), []
    else:
        plans = [
            (name, _place(order(drawn, nodes), drawn, nodes, node_limits))
            for name, order in OFFLINE_ORDERS.items()
        ]
        # the most GPU milli placed; among equals, the most pods (CPU-only ones too)
        name, packing = max(
            plans, key=lambda plan: (_placed_milli(plan[1], drawn), len(plan[1].placements))
        )
        notes = [f"mixed planner: {name} placed the most"]
    _set_modes(packing, drawn, catalog)
    return packing.packed(notes)


def _set_modes(packing: Packing, drawn: list[DrawnPod], catalog: dict[str, facts.GpuModel]) -> None:
    """Each GPU holding two or more pods becomes MIG when their profiles pack, else shared."""
    for gid, gpu in enumerate(packing.fleet):
        if len(gpu.pods) < 2:
            continue  # idle, or one pod holding the whole GPU
        pods = [drawn[position] for position, _ in gpu.pods]
        profiles = Counter(p.ask.profile for p in pods)
        model = catalog[packing.models[packing.node_of[gid]]]
        if WHOLE_ASK not in profiles and facts.can_pack(model, profiles):
            gpu.mode = "mig"
            gpu.layout = profiles
            gpu.pods = [(p.position, p.ask.profile) for p in pods]
        else:
            gpu.mode = "shared"
            gpu.replicas = [p.pod.gpu_milli for p in pods]
            gpu.pods = [(p.position, SHARED) for p in pods]
