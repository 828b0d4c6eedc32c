"""Static packing on a counterfactual MIG fleet, against the FGD paper's published anchor.

The FGD paper's static experiment (Weng et al., ATC'23), re-imagined on MIG: the trace's fleet
(every node with its GPU count, 1,213 nodes / 6,212 GPUs on `openb`) is taken as GPUs of ONE
MIG-capable catalog model (default A100-80GB, 7 compute slices). The trace has no MIG GPUs, so
this fleet is counterfactual: every figure from here must say so.

Pods are drawn from the trace's GPU pods with replacement (`random.Random(seed)`) until load
ρ = Σ requested milli ÷ (1000 · #GPUs) reaches `rho` (the draw that crosses it is kept); arrival
order is draw order; nothing departs. Each pod is
- a MIG ask when fractional (`num_gpu == 1`, `gpu_milli < 1000`): compute slices
  ⌈7 · milli / 1000⌉ rounded up to the model's smallest profile with at least that many (1g.10gb,
  2g.20gb, 3g.40gb, 4g.40gb on an A100-80GB); an ask that rounds up to the whole GPU (7g, e.g.
  the 810 milli pods) is a whole GPU, which is the same slices without reconfiguring;
- else `num_gpu` whole GPUs, all on ONE node (as in the paper).
A pod also needs its `cpu_milli` and `memory_mib` free on the node, as the paper's simulator (a
kube-scheduler) checks them; `node_limits=False` drops that check.

Methods, each deterministic for a seed:
- `planner`: the portal's MIG planner (`plan_exact`) chooses every GPU's shape for the demand of
  the whole batch at once, then pods are assigned in arrival order. It sees the whole batch
  (offline) while FGD places pods one at a time (online), so its figures are an upper bound
  flavoured comparison, not a like-for-like one. The planner plans per GPU and knows nothing
  of nodes (nor of CPU and memory), so multi-GPU pods are placed first (arrival order, first
  node with room and enough whole GPUs) and the planner shapes the GPUs left for the
  single-GPU demand; a pod then takes the first unit of its ask on a node with room. Its
  objective weighs every GPU-equivalent alike, so when the whole-GPU asks alone exceed the
  fleet (as at ρ = 1.3 on `openb`) it keeps every GPU whole and the fractional asks fail.
- `greedy`: the same with `plan_greedy`.
- `online-first-fit`: no planner. An arriving pod takes the first GPU (node file order) whose
  instances can grow by its profile (`facts.can_pack`) or an empty whole GPU, whichever comes
  first; whole-GPU asks take the first node with enough empty whole GPUs. MIG instances are
  created when a pod needs one, so a MIG GPU never holds an idle instance (no departures).

Metrics (mean over seeds, with min and max), as REPLAY.md defines them:
- A_req = Σ requested milli of placed pods ÷ (1000 · #GPUs): the paper's "allocation";
- A_slice = compute slices allocated to placed pods ÷ (slices · #GPUs); a whole GPU counts all
  its slices, so A_slice − A_req is the internal fragmentation of rounding to profiles;
- unallocated GPUs = (1 − A_req) · #GPUs, as the published anchors count them (FGD's 286 is
  (1 − 95.39 %) · 6,212); idle GPUs: GPUs with no pod at all; failed pods: drawn but not
  placed; GPUs reconfigured: GPUs not left whole (the fleet starts whole); seconds per seed.
Fragmentation F is not computed here.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from statistics import mean

from replay.trace import FULL_GPU_MILLI, TraceNode, TracePod, mig_compute_slices
from scheduler.catalog import facts
from scheduler.mig.planner import WHOLE, GpuState, PlanResult, Policy, plan_exact, plan_greedy

METHODS = ("planner", "greedy", "online-first-fit")
DEFAULT_MODEL = "A100-80GB"
DEFAULT_POLICY = Policy()

# Published results of the FGD paper's simulator on the `default` trace at ρ = 1.3, mean of 10
# seeds: policy -> (A_req %, unallocated GPUs). Source: hkust-adsl/kubernetes-scheduler-simulator,
# experiments/analysis/expected_results (as quoted in shared/design/REPLAY.md). FGD shares GPUs
# fractionally with no MIG rounding, so these rows have no A_slice.
FGD_ANCHORS: dict[str, tuple[float, int]] = {
    "random": (87.47, 778),
    "dot-product": (90.85, 568),
    "GPU clustering": (91.88, 505),
    "GPU packing": (92.00, 497),
    "best-fit": (93.08, 430),
    "FGD": (95.39, 286),
}

WHOLE_ASK = "whole"  # Ask.profile of a whole-GPU ask
Layout = tuple[tuple[str, int], ...]  # a MIG GPU's instances: sorted (profile, count)


@dataclass(frozen=True)
class Ask:
    """What one drawn pod needs: `gpus` whole GPUs (profile `whole`), or one MIG instance."""

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
    """One GPU of the fleet after packing: `whole`, or MIG with `layout` (profile -> instances)."""

    node: str
    index: int
    mode: str = "whole"
    layout: Counter[str] = field(default_factory=Counter)
    pods: list[tuple[int, str]] = field(default_factory=list)  # (position, profile or whole)

    def used(self) -> Counter[str]:
        return Counter(profile for _, profile in self.pods)


@dataclass
class PackingResult:
    method: str
    seed: int
    model: str
    rho: float
    nodes: int
    gpus: int
    drawn: int
    requested_milli: int
    placed: int
    placed_milli: int
    allocated_slices: int
    compute_slices: int  # per GPU
    idle_gpus: int  # GPUs with no pod at all
    reconfigured_gpus: int  # GPUs not left whole
    seconds: float
    node_limits: bool = True
    fleet: list[PackedGpu] = field(repr=False, default_factory=list)
    placements: dict[int, list[int]] = field(repr=False, default_factory=dict)  # position -> GPUs
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return self.drawn - self.placed

    @property
    def a_req(self) -> float:
        return self.placed_milli / (FULL_GPU_MILLI * self.gpus)

    @property
    def a_slice(self) -> float:
        return self.allocated_slices / (self.compute_slices * self.gpus)

    @property
    def unallocated_gpus(self) -> float:
        """(1 − A_req) · #GPUs: the published anchors' "unallocated GPUs" (e.g. FGD's 286 is
        (1 − 95.39 %) · 6,212), GPU capacity left unrequested, not GPUs left idle."""
        return (1 - self.a_req) * self.gpus


# --- asks and draws -----------------------------------------------------------------------------


def mig_model(key: str) -> facts.GpuModel:
    """The catalog model to re-imagine the fleet as; ValueError when unknown or not MIG."""
    try:
        model = facts.get_model(key)
    except facts.UnknownModel as exc:
        raise ValueError(exc.args[0]) from None
    if not model.mig_capable:
        raise ValueError(f"{model.key} is not MIG-capable; expected a MIG model for packing")
    return model


def profile_for_slices(model: facts.GpuModel, slices: int) -> str:
    """The smallest profile (compute, then memory) with at least `slices` compute slices, media
    extensions aside; the whole GPU's compute is a whole GPU, not a 7g instance."""
    if slices >= model.compute_slices:
        return WHOLE_ASK
    fits = [
        p for p in model.profiles.values() if "+me" not in p.name and p.compute_slices >= slices
    ]
    return min(fits, key=lambda p: (p.compute_slices, p.memory_slices, p.name)).name


def ask_of(pod: TracePod, model: facts.GpuModel) -> Ask:
    if pod.fractional:
        slices = mig_compute_slices(pod.gpu_milli, model.compute_slices)
        return Ask(profile_for_slices(model, slices))
    return Ask(WHOLE_ASK, pod.num_gpu)


def draw_pods(
    gpu_pods: Sequence[TracePod], gpus: int, rho: float, seed: int, model: facts.GpuModel
) -> list[DrawnPod]:
    """Draw with replacement until Σ requested milli reaches ρ · 1000 · #GPUs."""
    if not gpu_pods:
        raise ValueError("the trace has no GPU pods to draw from")
    rng = random.Random(seed)
    target = rho * FULL_GPU_MILLI * gpus
    drawn: list[DrawnPod] = []
    total = 0
    while total < target:
        pod = gpu_pods[rng.randrange(len(gpu_pods))]
        drawn.append(DrawnPod(len(drawn), pod, ask_of(pod, model)))
        total += pod.gpu_request_milli
    return drawn


def empty_fleet(nodes: Iterable[TraceNode]) -> list[PackedGpu]:
    """Every GPU of the trace's nodes, whole, in node file order."""
    return [PackedGpu(n.name, i) for n in nodes for i in range(n.gpus)]


# --- placement methods --------------------------------------------------------------------------


class _Packing:
    """A fleet being packed: GPUs in node file order, and the CPU and memory each node has left
    (checked only with `node_limits`, as the paper's simulator checks them)."""

    def __init__(self, nodes: Sequence[TraceNode], node_limits: bool) -> None:
        gpu_nodes = [n for n in nodes if n.gpus]
        self.fleet = empty_fleet(gpu_nodes)
        self.spans: list[range] = []  # node -> its GPUs' positions in the fleet
        self.node_of: list[int] = []  # GPU position -> node
        for node, n in enumerate(gpu_nodes):
            self.spans.append(range(len(self.node_of), len(self.node_of) + n.gpus))
            self.node_of += [node] * n.gpus
        self.cpu = [n.cpu_milli for n in gpu_nodes]
        self.memory = [n.memory_mib for n in gpu_nodes]
        self.node_limits = node_limits
        self.placements: dict[int, list[int]] = {}

    def room(self, node: int, pod: DrawnPod) -> bool:
        """The node has the pod's CPU and memory left."""
        return not self.node_limits or (
            self.cpu[node] >= pod.pod.cpu_milli and self.memory[node] >= pod.pod.memory_mib
        )

    def empty_whole(self, gid: int) -> bool:
        return self.fleet[gid].mode == "whole" and not self.fleet[gid].pods

    def place(self, gids: list[int], pod: DrawnPod) -> None:
        node = self.node_of[gids[0]]
        self.cpu[node] -= pod.pod.cpu_milli
        self.memory[node] -= pod.pod.memory_mib
        for gid in gids:
            self.fleet[gid].pods.append((pod.position, pod.ask.profile))
        self.placements[pod.position] = list(gids)

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


Packed = tuple[list[PackedGpu], dict[int, list[int]], list[str]]  # fleet, placements, notes


def pack_with_plan(
    drawn: list[DrawnPod],
    nodes: Sequence[TraceNode],
    model: facts.GpuModel,
    planner: Callable[[list[GpuState], dict[str, int], Policy], PlanResult],
    policy: Policy = DEFAULT_POLICY,
    node_limits: bool = True,
) -> Packed:
    """Multi-GPU pods first on one node each, then one plan for every other GPU and the rest of
    the demand, then single-GPU pods in arrival order, each on the first unit of its ask the
    plan offers on a node with room."""
    packing = _Packing(nodes, node_limits)
    fleet = packing.fleet
    notes: list[str] = []
    for pod in drawn:
        if pod.ask.gpus > 1:
            packing.place_whole(pod, range(len(packing.spans)))
    multi_failed = sum(1 for p in drawn if p.ask.gpus > 1 and p.position not in packing.placements)
    if multi_failed:
        notes.append(f"{multi_failed} multi-GPU pods found no node with enough whole GPUs")

    whole_slug = facts.class_slug(model, "whole")
    demand: Counter[str] = Counter()
    for pod in drawn:
        if pod.ask.gpus == 1:
            slug = whole_slug if pod.ask.whole else facts.class_slug(model, "mig", pod.ask.profile)
            demand[slug] += 1
    open_gpus = [gid for gid, gpu in enumerate(fleet) if not gpu.pods]
    states = [GpuState(fleet[g].node, fleet[g].index, model.key, WHOLE) for g in open_gpus]
    plan = planner(states, dict(demand), policy)
    notes.extend(plan.notes)

    # Free units per ask and node, in fleet order.
    units: dict[str, dict[int, deque[int]]] = defaultdict(dict)
    for gid in open_gpus:
        gpu = fleet[gid]
        shape = plan.proposed[(gpu.node, gpu.index)]
        node_units = [(WHOLE_ASK, 1)]
        if shape.mode == "mig":
            gpu.mode = "mig"
            gpu.layout = Counter(dict(shape.devices))
            node_units = list(shape.devices)
        elif shape.mode != "whole":  # MIG models are offered only MIG or whole shapes
            raise RuntimeError(f"planner proposed {shape.label()} for a MIG GPU")
        for ask, count in node_units:
            units[ask].setdefault(packing.node_of[gid], deque()).extend([gid] * count)
    nodes_with = {ask: list(by_node) for ask, by_node in units.items()}  # in node order
    for pod in drawn:
        if pod.ask.gpus != 1:
            continue
        candidates = nodes_with.get(pod.ask.profile, [])
        for node in candidates:
            if packing.room(node, pod):
                queue = units[pod.ask.profile][node]
                packing.place([queue.popleft()], pod)
                if not queue:
                    candidates.remove(node)
                break
    return packing.packed(notes)


def pack_online_first_fit(
    drawn: list[DrawnPod],
    nodes: Sequence[TraceNode],
    model: facts.GpuModel,
    node_limits: bool = True,
) -> Packed:
    """Each pod in arrival order on the first GPU that can take it now (see the module doc)."""
    packing = _Packing(nodes, node_limits)
    fleet = packing.fleet
    layout_of: list[Layout] = [()] * len(fleet)  # a GPU's MIG instances; () while whole
    fits: dict[tuple[Layout, str], bool] = {}
    profiles = sorted({p.ask.profile for p in drawn if not p.ask.whole})
    least_cpu = min((p.pod.cpu_milli for p in drawn), default=0)
    least_memory = min((p.pod.memory_mib for p in drawn), default=0)

    def can_grow(layout: Layout, profile: str) -> bool:
        if (layout, profile) not in fits:
            grown = Counter(dict(layout)) + Counter([profile])
            fits[(layout, profile)] = facts.can_pack(model, grown)
        return fits[(layout, profile)]

    def takes(gid: int, profile: str) -> bool:
        if fleet[gid].mode == "whole":
            return not fleet[gid].pods and (profile == WHOLE_ASK or can_grow((), profile))
        return profile != WHOLE_ASK and can_grow(layout_of[gid], profile)

    def asks_taken(node: int) -> set[str]:
        """What the node's GPUs can still take (nothing once no pod's CPU or memory fits)."""
        if packing.node_limits and (
            packing.cpu[node] < least_cpu or packing.memory[node] < least_memory
        ):
            return set()
        span = packing.spans[node]
        return {a for a in (WHOLE_ASK, *profiles) if any(takes(gid, a) for gid in span)}

    taken = [asks_taken(node) for node in range(len(packing.spans))]
    open_nodes = [node for node in range(len(packing.spans)) if taken[node]]
    for pod in drawn:
        ask = pod.ask.profile
        candidates = (n for n in open_nodes if ask in taken[n])
        if pod.ask.whole:
            node = packing.place_whole(pod, candidates)
        else:
            node = next((n for n in candidates if packing.room(n, pod)), None)
            if node is not None:
                gid = next(g for g in packing.spans[node] if takes(g, ask))
                gpu = fleet[gid]
                gpu.mode = "mig"
                gpu.layout[ask] += 1
                layout_of[gid] = tuple(sorted(gpu.layout.items()))
                packing.place([gid], pod)
        if node is not None:
            taken[node] = asks_taken(node)
            if not taken[node]:
                open_nodes.remove(node)
    return packing.packed([])


# --- running and reporting ----------------------------------------------------------------------


def _measure(
    method: str,
    seed: int,
    model: facts.GpuModel,
    rho: float,
    nodes: Sequence[TraceNode],
    drawn: list[DrawnPod],
    packed: Packed,
    seconds: float,
    node_limits: bool,
) -> PackingResult:
    fleet, placements, notes = packed
    slices = {p.name: p.compute_slices for p in model.profiles.values()}
    slices[WHOLE_ASK] = model.compute_slices
    placed = [drawn[position] for position in sorted(placements)]
    return PackingResult(
        method=method,
        seed=seed,
        model=model.key,
        rho=rho,
        nodes=sum(1 for n in nodes if n.gpus),
        gpus=len(fleet),
        drawn=len(drawn),
        requested_milli=sum(p.pod.gpu_request_milli for p in drawn),
        placed=len(placed),
        placed_milli=sum(p.pod.gpu_request_milli for p in placed),
        allocated_slices=sum(slices[p.ask.profile] * p.ask.gpus for p in placed),
        compute_slices=model.compute_slices,
        idle_gpus=sum(1 for gpu in fleet if not gpu.pods),
        reconfigured_gpus=sum(1 for gpu in fleet if gpu.mode != "whole"),
        seconds=seconds,
        node_limits=node_limits,
        fleet=fleet,
        placements=placements,
        notes=notes,
    )


def run_packing(
    pods: Sequence[TracePod],
    nodes: Sequence[TraceNode],
    model: str = DEFAULT_MODEL,
    rho: float = 1.3,
    seeds: Iterable[int] = range(10),
    methods: Sequence[str] = METHODS,
    progress: Callable[[str], object] | None = print,
    policy: Policy = DEFAULT_POLICY,
    node_limits: bool = True,
) -> list[PackingResult]:
    """Draw each seed's pods once and pack them with every method; one result per (seed,
    method). `pods` may include non-GPU pods (they are left out of the draw). `node_limits`:
    a pod also needs its CPU and memory on the node (as in the paper's simulator)."""
    gpu_model = mig_model(model)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(
            f"unknown packing method {', '.join(unknown)}; known: {', '.join(METHODS)}"
        )
    if rho <= 0:
        raise ValueError(f"rho {rho}; expected a load above 0")
    gpu_pods = [p for p in pods if p.num_gpu]
    gpus = sum(n.gpus for n in nodes)
    if not gpus:
        raise ValueError("the node list has no GPUs")
    say = progress or (lambda _: None)
    results = []
    for seed in seeds:
        drawn = draw_pods(gpu_pods, gpus, rho, seed, gpu_model)
        for method in methods:
            started = time.perf_counter()
            if method == "online-first-fit":
                packed = pack_online_first_fit(drawn, nodes, gpu_model, node_limits)
            else:
                planner = plan_exact if method == "planner" else plan_greedy
                packed = pack_with_plan(drawn, nodes, gpu_model, planner, policy, node_limits)
            seconds = time.perf_counter() - started
            result = _measure(
                method, seed, gpu_model, rho, nodes, drawn, packed, seconds, node_limits
            )
            results.append(result)
            say(
                f"packing seed {seed} {method}: {result.drawn} pods drawn, {result.failed} failed, "
                f"A_req {result.a_req:.2%}, A_slice {result.a_slice:.2%} ({result.seconds:.1f} s)"
            )
    return results


def _spread(values: list[float], digits: int, scale: float = 1.0) -> str:
    low, high, avg = min(values) * scale, max(values) * scale, mean(values) * scale
    if round(low, digits) == round(high, digits):
        return f"{avg:.{digits}f}"
    return f"{avg:.{digits}f} ({low:.{digits}f}–{high:.{digits}f})"


def packing_table(results: Sequence[PackingResult]) -> str:
    """Markdown: measured methods (mean over seeds, min–max in brackets), then the published
    anchors, with a note saying what the fleet is."""
    if not results:
        raise ValueError("no packing results to tabulate")
    by_method: dict[str, list[PackingResult]] = defaultdict(list)
    for r in results:
        by_method[r.method].append(r)
    lines = [
        "| method | A_req % | A_slice % | unallocated GPUs | failed pods | s/seed "
        "| idle GPUs | GPUs reconfigured |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, rows in by_method.items():
        lines.append(
            f"| {method} (MIG, counterfactual fleet) "
            f"| {_spread([r.a_req for r in rows], 2, 100)} "
            f"| {_spread([r.a_slice for r in rows], 2, 100)} "
            f"| {_spread([r.unallocated_gpus for r in rows], 0)} "
            f"| {_spread([float(r.failed) for r in rows], 0)} "
            f"| {_spread([r.seconds for r in rows], 2)} "
            f"| {_spread([float(r.idle_gpus) for r in rows], 0)} "
            f"| {_spread([float(r.reconfigured_gpus) for r in rows], 0)} |"
        )
    for policy, (a_req, unallocated) in FGD_ANCHORS.items():
        lines.append(
            f"| {policy} (published, fractional GPUs) | {a_req:.2f} | – | {unallocated} "
            "| – | – | – | – |"
        )
    first = results[0]
    seeds = sorted({r.seed for r in results})
    limits = (
        "each node's CPU and memory respected" if first.node_limits else "CPU and memory ignored"
    )
    lines += [
        "",
        f"Measured rows: the trace's fleet ({first.nodes:,} nodes, {first.gpus:,} GPUs) "
        f"re-imagined as {first.model} MIG GPUs, a counterfactual fleet (the trace has no MIG "
        f"GPUs); pods drawn until ρ = {first.rho:g}, no departures, {limits}, "
        f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}, mean (min–max). `planner` and "
        "`greedy` plan the whole batch at once (offline), the published rows place pods one at "
        "a time (online) with fractional sharing and no MIG rounding (hkust-adsl/"
        "kubernetes-scheduler-simulator, experiments/analysis/expected_results; Weng et al., "
        "ATC'23). Unallocated GPUs = (1 − A_req) · #GPUs, as in the published rows; idle GPUs "
        "hold no pod at all.",
    ]
    return "\n".join(lines)
