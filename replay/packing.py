"""Static packing on a counterfactual MIG fleet, against the FGD paper's published rows.

The FGD paper's static experiment (Weng et al., ATC'23), re-imagined on MIG: the trace's fleet
(every node with its GPU count and trace model, 1,213 nodes / 6,212 GPUs on `openb`) with every
trace model taken as ONE MIG-capable catalog model (default A100-80GB, 7 compute slices;
`fleet.model_map`). The trace has no MIG GPUs, so this fleet is counterfactual: every figure
from here must say so. A pod's `gpu_spec` is checked against the node's trace model.

The workload is built as the published runs build theirs (`draw_pods`: the whole pod list, CPU-
only pods too, plus draws with replacement, shuffled) and cut where load ρ = Σ requested milli
÷ (1000 · #GPUs) would pass `rho`; arrival order is the shuffled order; nothing departs. A
CPU-only pod needs only CPU and memory (`fleet.Packing.place_cpu_only`). Each GPU pod is
- a MIG ask when fractional (`num_gpu == 1`, `gpu_milli < 1000`): compute slices
  ⌈7 · milli / 1000⌉ rounded up to the model's smallest profile with at least that many (1g.10gb,
  2g.20gb, 3g.40gb, 4g.40gb on an A100-80GB); an ask that rounds up to the whole GPU (7g, e.g.
  the 810 milli pods) is a whole GPU, which is the same slices without reconfiguring;
- else `num_gpu` whole GPUs, all on ONE node (as in the paper).
A pod also needs its `cpu_milli` and `memory_mib` free on the node, as the paper's simulator (a
kube-scheduler) checks them; `node_limits=False` drops that check.

MIG-only methods, each deterministic for a seed (the mixed ones, where a GPU may also be shared
by exact milli, are in `replay.mixed`):
- `planner`: the portal's MIG planner (`plan_exact`) chooses every GPU's shape for the demand of
  the whole batch at once, then pods are assigned in arrival order. It sees the whole batch
  (offline) while FGD places pods one at a time (online), so its figures are an upper bound
  flavoured comparison, not a like-for-like one. The planner plans per GPU and knows nothing
  of nodes (nor of CPU and memory), so multi-GPU pods are placed first (arrival order, first
  node with room and enough whole GPUs) and the planner shapes the GPUs left for the
  single-GPU demand; a pod then takes the first unit of its ask on a node with room. Its
  objective weighs every GPU-equivalent alike, so when the whole-GPU asks alone exceed the
  fleet (as at ρ = 1.3 on `openb`) it keeps every GPU whole and the fractional asks fail.
  CPU-only pods are placed first (their load is there whatever the plan).
- `greedy`: the same with `plan_greedy`.
- `online-first-fit`: no planner. An arriving pod takes the first GPU (node file order) whose
  instances can grow by its profile (`facts.can_pack`) or an empty whole GPU, whichever comes
  first; whole-GPU asks take the first node with enough empty whole GPUs. MIG instances are
  created when a pod needs one, so a MIG GPU never holds an idle instance (no departures).

Metrics (mean over seeds, with min and max), as REPLAY.md defines them:
- A_req = Σ requested milli of placed pods ÷ (1000 · #GPUs): the paper's "allocation";
- A_slice = compute slices allocated to placed pods ÷ (slices · #GPUs); a whole GPU counts all
  its slices, so A_slice − A_req is the internal fragmentation of rounding to profiles;
- unallocated GPUs = (1 − A_req) · #GPUs, as the published rows count them (FGD's 286 is
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
from fractions import Fraction

from catalog import facts
from replay.mixed import MIXED_METHODS, pack_mixed
from replay.packed import WHOLE_ASK, Ask, DrawnPod, Packed, PackedGpu, Packing, model_map
from replay.trace import FULL_GPU_MILLI, TraceNode, TracePod, mig_compute_slices
from scheduler.mig.planner import WHOLE, GpuState, PlanResult, Policy, plan_exact, plan_greedy

MIG_METHODS = ("planner", "greedy", "online-first-fit")
METHODS = (*MIG_METHODS, *MIXED_METHODS)
DEFAULT_MODEL = "A100-80GB"
DEFAULT_POLICY = Policy()

Layout = tuple[tuple[str, int], ...]  # a MIG GPU's instances: sorted (profile, count)


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
    allocated_slices: Fraction  # shared GPUs: each replica's exact share, kept exact
    compute_slices: int  # per GPU
    idle_gpus: int  # GPUs with no pod at all
    mig_gpus: int
    shared_gpus: int
    seconds: float
    node_limits: bool = True
    model_map: dict[str, str] = field(default_factory=dict)  # trace model -> catalog model
    fleet: list[PackedGpu] = field(repr=False, default_factory=list)
    pods: list[DrawnPod] = field(repr=False, default_factory=list)  # the draw, arrival order
    placements: dict[int, list[int]] = field(repr=False, default_factory=dict)  # position -> GPUs
    notes: list[str] = field(default_factory=list)

    @property
    def reconfigured_gpus(self) -> int:
        """GPUs not left whole (the fleet starts whole)."""
        return self.mig_gpus + self.shared_gpus

    @property
    def failed(self) -> int:
        return self.drawn - self.placed

    @property
    def failed_cpu_only(self) -> int:
        """Failed pods that ask no GPU (they count in ρ and A_req for nothing)."""
        return sum(1 for p in self.pods if not p.pod.num_gpu and p.position not in self.placements)

    @property
    def a_req(self) -> float:
        return self.placed_milli / (FULL_GPU_MILLI * self.gpus)

    @property
    def a_slice(self) -> float:
        return float(self.allocated_slices / (self.compute_slices * self.gpus))

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


TUNE_RHO = 1.3  # the load the published runs are tuned to (`-tune 1.3` in their run scripts)


def draw_pods(
    pods: Sequence[TracePod], gpus: int, rho: float, seed: int, model: facts.GpuModel
) -> list[DrawnPod]:
    """The workload the paper's simulator builds from a pod list (hkust-adsl/kubernetes-
    scheduler-simulator, pkg/simulator/simulator.go: TunePods, tuneUpPods, tuneDownPods, and the
    run scripts' `--shuffle-pod`), with `random.Random(seed)` for Go's generator: every pod of
    the list, CPU-only ones too, then pods drawn from the list with replacement appended until
    the next would take the GPU request past max(ρ, 1.3) · 1000 · #GPUs (or, when the list
    alone asks more, pods drawn at random removed until it does not), shuffled into arrival
    order; then the arrivals while the request stays within ρ · 1000 · #GPUs. So ρ = 1.0 is the
    first part of a 1.3 workload, as the published column 100 is."""
    if not any(p.num_gpu for p in pods):
        raise ValueError("the trace has no GPU pods to draw from")
    rng = random.Random(seed)
    build = max(rho, TUNE_RHO) * FULL_GPU_MILLI * gpus
    workload = list(pods)
    total = sum(p.gpu_request_milli for p in workload)
    if total > build:
        while total > build:
            total -= workload.pop(rng.randrange(len(workload))).gpu_request_milli
    else:
        while True:
            pod = pods[rng.randrange(len(pods))]
            if total + pod.gpu_request_milli > build:
                break
            workload.append(pod)
            total += pod.gpu_request_milli
    rng.shuffle(workload)
    target = rho * FULL_GPU_MILLI * gpus
    drawn: list[DrawnPod] = []
    total = 0
    for pod in workload:
        if total + pod.gpu_request_milli > target:
            break
        drawn.append(DrawnPod(len(drawn), pod, ask_of(pod, model)))
        total += pod.gpu_request_milli
    return drawn


# --- placement methods --------------------------------------------------------------------------


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
    packing = Packing(nodes, node_limits)
    fleet = packing.fleet
    notes: list[str] = []
    for pod in drawn:
        if not pod.pod.num_gpu:
            packing.place_cpu_only(pod)  # offline: the CPU-only pods' load is there first
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
    packing = Packing(nodes, node_limits)
    fleet = packing.fleet
    layout_of: list[Layout] = [()] * len(fleet)  # a GPU's MIG instances; () while whole
    fits: dict[tuple[Layout, str], bool] = {}
    profiles = sorted({p.ask.profile for p in drawn if not p.ask.whole})
    least_cpu = min((p.pod.cpu_milli for p in drawn if p.pod.num_gpu), default=0)
    least_memory = min((p.pod.memory_mib for p in drawn if p.pod.num_gpu), default=0)

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
        if not pod.pod.num_gpu:
            node = packing.place_cpu_only(pod)
        elif pod.ask.whole:
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
        if node is not None and taken[node]:
            taken[node] = asks_taken(node)
            if not taken[node]:
                open_nodes.remove(node)
    return packing.packed([])


# --- running and reporting ----------------------------------------------------------------------


def allocated_slices(fleet: Sequence[PackedGpu], model: facts.GpuModel) -> Fraction:
    """Compute slices held by pods: all of a whole GPU with a pod, each MIG instance's, and
    on a shared GPU each replica's exact share (milli · slices / 1000: no rounding)."""
    slices = {p.name: p.compute_slices for p in model.profiles.values()}
    total = Fraction(0)
    for gpu in fleet:
        if not gpu.pods:
            continue
        if gpu.mode == "mig":
            total += sum(slices[profile] for _, profile in gpu.pods)
        elif gpu.mode == "shared":
            total += Fraction(sum(gpu.replicas) * model.compute_slices, FULL_GPU_MILLI)
        else:
            total += model.compute_slices
    return total


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
        allocated_slices=allocated_slices(fleet, model),
        compute_slices=model.compute_slices,
        idle_gpus=sum(1 for gpu in fleet if not gpu.pods),
        mig_gpus=sum(1 for gpu in fleet if gpu.mode == "mig"),
        shared_gpus=sum(1 for gpu in fleet if gpu.mode == "shared"),
        seconds=seconds,
        node_limits=node_limits,
        model_map=model_map(nodes, model.key),
        fleet=fleet,
        pods=drawn,
        placements=placements,
        notes=notes,
    )


def pack(
    method: str,
    drawn: list[DrawnPod],
    nodes: Sequence[TraceNode],
    model: facts.GpuModel,
    policy: Policy = DEFAULT_POLICY,
    node_limits: bool = True,
) -> Packed:
    """One method on one draw."""
    if method == "online-first-fit":
        return pack_online_first_fit(drawn, nodes, model, node_limits)
    if method in MIXED_METHODS:
        catalog = {
            trace: facts.get_model(key) for trace, key in model_map(nodes, model.key).items()
        }
        return pack_mixed(drawn, nodes, catalog, node_limits, online=method == "online-best-fit")
    planner = plan_exact if method == "planner" else plan_greedy
    return pack_with_plan(drawn, nodes, model, planner, policy, node_limits)


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
    gpus = sum(n.gpus for n in nodes)
    if not gpus:
        raise ValueError("the node list has no GPUs")
    say = progress or (lambda _: None)
    results = []
    for seed in seeds:
        drawn = draw_pods(pods, gpus, rho, seed, gpu_model)
        for method in methods:
            started = time.perf_counter()
            packed = pack(method, drawn, nodes, gpu_model, policy, node_limits)
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
