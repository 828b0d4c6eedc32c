"""MIG layout and sharing planner (pure: no Django, no I/O).

Turns the fleet (per GPU: model, current shape, what running pods hold) and the approved demand
per resource class into a proposed shape per GPU, with three objectives in strict order:

1. serve the most demand, weighted by GPU-equivalents;
2. change the fewest GPUs (a change re-creates every instance on the GPU), then disturb the
   fewest pods;
3. leave the surplus in the shapes most often asked for (low fragmentation, in the spirit of
   the FGD paper), plus an optional bonus for large shapes.

`plan_exact` solves this as three integer programs (HiGHS), one objective at a time (the first
two to proven optimality; the third, a tie-break, is time-boxed and starts from the second), over
*classes of identical decision units*: GPUs of one model with the same current layout that may
change are interchangeable, so one integer variable counts how many of them take each candidate
layout. GPUs that may not change (busy, or outside the chosen nodes) are constants. `plan_greedy`
is the baseline a person would follow: fix the largest shortfall first, one GPU at a time.

Which instances are busy: the device plugin does not say which GPU a pod got, so a node's busy
units of a resource occupy its instances in GPU order (as `scheduler.mig.layouts.assign_tenants`
draws them). Every candidate layout is a packable multiset from `catalog`.

Every GPU decides alone: mig-parted takes per-GPU entries, and the device plugin's sharing config
lists the GPUs it shares (`devices: ["0", "1"]`), so a non-MIG node may be part whole, part
shared, and only as many GPUs are shared as the shared demand needs (objective 2 changes no GPU
it need not). One limit stays per node: a node's shared GPUs all have the same replicas (they
are advertised as one resource, nvidia.com/gpu.shared, whose units must be alike).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass

from catalog import facts
from catalog.facts import class_slug as class_slug

# The shapes and the planner's inputs live beside it; re-exported: callers know them from here.
from scheduler.mig.shapes import WEIGHT_SCALE as WEIGHT_SCALE
from scheduler.mig.shapes import WHOLE as WHOLE
from scheduler.mig.shapes import GpuState as GpuState
from scheduler.mig.shapes import PlanResult as PlanResult
from scheduler.mig.shapes import Policy as Policy
from scheduler.mig.shapes import Shape as Shape
from scheduler.mig.shapes import candidate_shapes as candidate_shapes
from scheduler.mig.shapes import class_weight as class_weight
from scheduler.mig.shapes import instance_units as instance_units
from scheduler.mig.shapes import supply as supply
from scheduler.mig.shapes import units_of as units_of

DEFAULT_POLICY = Policy()

# --- decision units -----------------------------------------------------------------------------


@dataclass
class _Unit:
    """One decision: one GPU (its MIG layout, or whole, or shared)."""

    gpus: list[GpuState]
    movable: bool

    @property
    def model(self) -> str:
        return self.gpus[0].model

    @property
    def shape(self) -> Shape:
        return self.gpus[0].shape

    @property
    def busy(self) -> bool:
        return any(g.busy for g in self.gpus)

    @property
    def pods(self) -> set[str]:
        return {p for g in self.gpus for p in g.pods}

    def cost(self, per_gpu: int) -> int:
        """Objective 2 per change: GPUs (times `per_gpu`, more than the number of units), plus
        one when pods run there, so idle GPUs go first. Among busy units of one class, the ones
        with the fewest pods are changed first."""
        return per_gpu * len(self.gpus) + (1 if self.pods else 0)


def _units(gpus: list[GpuState], policy: Policy) -> list[_Unit]:
    per_node: dict[str, list[GpuState]] = defaultdict(list)
    for g in gpus:
        per_node[g.node].append(g)
    units = []
    for node, node_gpus in sorted(per_node.items()):
        node_gpus.sort(key=lambda g: g.index)
        in_scope = policy.nodes is None or node in policy.nodes
        for g in node_gpus:
            units.append(_Unit([g], in_scope and (policy.allow_draining or not g.busy)))
    return units


def _replica_choices(gpus: list[GpuState], policy: Policy) -> dict[str, set[int]]:
    """Nodes whose shared GPUs could end up with different replicas (more than one option, or
    GPUs shared today with replicas outside the options): node -> the replicas possible there.
    Only these need the one-replicas-per-node rule; elsewhere it holds by itself."""
    per_node: dict[str, set[int]] = defaultdict(set)
    for g in gpus:
        if not facts.get_model(g.model).mig_capable:
            per_node[g.node] |= set(policy.replica_options)
            if g.shape.mode == "shared":
                per_node[g.node].add(g.shape.replicas)
    return {node: reps for node, reps in per_node.items() if len(reps) > 1}


def _popularity(demand: dict[str, int], policy: Policy) -> dict[str, float]:
    """Value of one surplus unit per class: its model's share of demand asking for that class,
    plus the large-shape bonus. Drives objective 3."""
    per_model: Counter = Counter()
    model_of = {}
    for model in facts.load_catalog().values():
        for c in [class_slug(model, "whole"), class_slug(model, "shared")] + [
            class_slug(model, "mig", p) for p in model.profiles
        ]:
            model_of[c] = model.slug
    for c, n in demand.items():
        per_model[model_of.get(c, "")] += n * class_weight(c)
    pop = {}
    for c in model_of:
        share = demand.get(c, 0) * class_weight(c) / per_model[model_of[c]] if demand.get(c) else 0
        pop[c] = share + policy.large_shape_weight * class_weight(c) / WEIGHT_SCALE
    return pop


def _result(
    method: str,
    gpus: list[GpuState],
    units: list[_Unit],
    chosen: list[Shape],
    demand: dict[str, int],
    started: float,
) -> PlanResult:
    proposed: dict[tuple[str, int], Shape] = {}
    changed: list[tuple[str, int]] = []
    disturbed: set[str] = set()
    for unit, shape in zip(units, chosen, strict=True):
        for g in unit.gpus:
            proposed[(g.node, g.index)] = shape
        if shape != unit.shape:
            changed.extend((g.node, g.index) for g in unit.gpus)
            disturbed |= unit.pods
    before, after = supply(gpus), supply(gpus, proposed)
    served = {c: min(n, after.get(c, 0)) for c, n in demand.items() if n > 0}
    return PlanResult(
        method=method,
        proposed=proposed,
        demand={c: n for c, n in demand.items() if n > 0},
        supply_before=dict(before),
        supply_after=dict(after),
        served=served,
        unserved={c: demand[c] - s for c, s in served.items() if demand[c] > s},
        changed=changed,
        disturbed_pods=sorted(disturbed),
        solve_seconds=time.perf_counter() - started,
    )


# --- exact: three lexicographic integer programs --------------------------------------------------


def plan_exact(
    gpus: list[GpuState], demand: dict[str, int], policy: Policy = DEFAULT_POLICY
) -> PlanResult:
    import highspy  # imported here: the rest of the module (and its users) need no solver
    import numpy as np

    started = time.perf_counter()
    units = _units(gpus, policy)
    replica_nodes = _replica_choices(gpus, policy)
    fixed: Counter = Counter()
    fixed_replicas: dict[str, set[int]] = defaultdict(set)  # node -> replicas of fixed shared GPUs
    classes: dict[tuple, list[int]] = defaultdict(list)  # class key -> unit positions
    for pos, unit in enumerate(units):
        node = unit.gpus[0].node
        if unit.movable:
            # Busy and idle units share a class: the same columns, and the realisation below
            # changes the idle ones (then those with the fewest pods) first. Classes stay within
            # a node where its replicas are to be chosen (one count per node).
            scope = node if node in replica_nodes else ""
            key = (unit.model, len(unit.gpus), unit.shape, len(unit.gpus), scope)
            classes[key].append(pos)
        else:
            model = facts.get_model(unit.model)
            for _ in unit.gpus:
                fixed.update(units_of(model, unit.shape))
            if unit.shape.mode == "shared":
                fixed_replicas[node].add(unit.shape.replicas)

    demanded = sorted(c for c, n in demand.items() if n > 0)
    row_of = {c: i for i, c in enumerate(demanded)}
    # Columns: one integer per (class, candidate shape), then one `served` per demanded class.
    cols: list[tuple[tuple, Shape, int]] = []  # (class key, shape, cost of one unit)
    for key in classes:
        model_key, _, current, cost, scope = key
        shapes = candidate_shapes(model_key, policy.sharing, policy.replica_options)
        # a node that keeps GPUs shared with other replicas may share more GPUs with those
        kept = [Shape("shared", (), r) for r in sorted(replica_nodes.get(scope, ()))]
        for shape in dict.fromkeys((current, *shapes, *kept)):
            cols.append((key, shape, 0 if shape == current else cost))
    n_x, n_s = len(cols), len(demanded)
    if not n_x:  # nothing may change
        return _result("exact", gpus, units, [u.shape for u in units], demand, started)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("threads", 1)
    inf = highspy.kHighsInf
    upper = [len(classes[key]) for key, _, _ in cols] + [demand[c] for c in demanded]
    h.addVars(n_x + n_s, np.zeros(n_x + n_s), np.array(upper, dtype=float))
    h.changeColsIntegrality(
        n_x, np.arange(n_x), np.full(n_x, highspy.HighsVarType.kInteger, dtype=np.uint8)
    )
    # Each class's units take exactly one shape each.
    by_class: dict[tuple, list[int]] = defaultdict(list)
    for j, (key, _, _) in enumerate(cols):
        by_class[key].append(j)
    for key, js in by_class.items():
        n = len(classes[key])
        h.addRow(n, n, len(js), np.array(js), np.ones(len(js)))
    # served_c <= fixed supply + what the chosen shapes offer.
    supply_terms: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for j, (key, shape, _) in enumerate(cols):
        model = facts.get_model(key[0])
        for c, n in units_of(model, shape).items():
            supply_terms[c].append((j, n * key[1]))
    for c in demanded:
        idx = [n_x + row_of[c]] + [j for j, _ in supply_terms[c]]
        val = [1.0] + [-v for _, v in supply_terms[c]]
        h.addRow(-inf, fixed.get(c, 0), len(idx), np.array(idx), np.array(val))

    # Busy units changed per class: b_k >= changes - idle units (the idle ones change first).
    busy_rows = []
    for key, positions in classes.items():
        idle = sum(1 for p in positions if not units[p].pods)
        if idle < len(positions):
            busy_rows.append((key, idle, len(positions) - idle))
    if busy_rows:
        n_b = len(busy_rows)
        h.addVars(n_b, np.zeros(n_b), np.array([float(b) for _, _, b in busy_rows]))
        for i, (key, idle, _) in enumerate(busy_rows):
            js = [j for j in by_class[key] if cols[j][1] != key[2]]
            cols_b = np.array([*js, n_x + n_s + i])
            h.addRow(-inf, idle, len(cols_b), cols_b, np.array([1.0] * len(js) + [-1.0]))
    _one_replicas_per_node(h, cols, classes, replica_nodes, fixed_replicas)

    def solve(costs: list[float], sense_max: bool) -> float:
        h.changeColsCost(len(costs), np.arange(len(costs)), np.array(costs, dtype=float))
        h.changeObjectiveSense(
            highspy.ObjSense.kMaximize if sense_max else highspy.ObjSense.kMinimize
        )
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"planner ILP: {h.modelStatusToString(h.getModelStatus())}")
        return h.getInfo().objective_function_value

    # 1. most demand served (weights are integers: round the optimum, keep it as a floor).
    serve = [0.0] * n_x + [float(class_weight(c)) for c in demanded] + [0.0] * len(busy_rows)
    if policy.serve_at_least is None:
        best = round(solve(serve, True))
    else:
        best = round(policy.serve_at_least * WEIGHT_SCALE)
    h.addRow(best - 0.5, inf, n_s, np.arange(n_x, n_x + n_s), np.array(serve[n_x : n_x + n_s]))
    # 2. fewest GPUs changed (costs are GPU counts: integral, so a gap below 1 is exact).
    n_b = len(busy_rows)
    change = [float(cost) for _, _, cost in cols] + [0.0] * (n_s + n_b)
    h.setSolution(h.getSolution())
    h.setOptionValue("mip_abs_gap", 0.99)
    least = round(solve(change, False))
    nz = [j for j in range(n_x) if change[j]]
    if nz:
        h.addRow(-inf, least + 0.5, len(nz), np.array(nz), np.array([change[j] for j in nz]))
    # 2b. then fewest busy GPUs among them (only when draining lets busy GPUs move).
    if n_b:
        h.setSolution(h.getSolution())
        busiest = round(solve([0.0] * (n_x + n_s) + [1.0] * n_b, False))
        b_cols = np.arange(n_x + n_s, n_x + n_s + n_b)
        h.addRow(-inf, busiest + 0.5, n_b, b_cols, np.ones(n_b))
    # 3. surplus in popular shapes: value of supply minus what is served.
    pop = _popularity(demand, policy)
    shape_value = [
        key[1] * sum(pop.get(c, 0) * n for c, n in units_of(facts.get_model(key[0]), s).items())
        for key, s, _ in cols
    ]
    x = list(h.getSolution().col_value)
    if any(shape_value):
        # A tie-break among plans already optimal on 1 and 2: started from the stage-2 plan and
        # time-boxed, since symmetric classes can make proving its optimum slow.
        h.setSolution(h.getSolution())
        h.setOptionValue("time_limit", h.getRunTime() + policy.polish_seconds)  # cumulative clock
        values = shape_value + [-pop.get(c, 0) for c in demanded] + [0.0] * len(busy_rows)
        h.changeColsCost(len(values), np.arange(len(values)), np.array(values, dtype=float))
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)
        h.run()
        if h.getInfo().primal_solution_status == 2:  # feasible: at least as good as stage 2
            x = list(h.getSolution().col_value)

    chosen: list[Shape] = [u.shape for u in units]
    for key, js in by_class.items():
        # Changes go first to the units with the fewest pods, then in node order.
        positions = sorted(classes[key], key=lambda p: (len(units[p].pods), p))
        counts = [(cols[j][1], round(x[j])) for j in js if cols[j][1] != key[2]]
        k = 0
        for shape, n in counts:
            for pos in positions[k : k + n]:
                chosen[pos] = shape
            k += n
    return _result("exact", gpus, units, chosen, demand, started)


def _one_replicas_per_node(h, cols, classes, replica_nodes, fixed_replicas) -> None:
    """A node's shared GPUs share one replicas count: a binary y per (node, replicas), at most
    one set per node (forced where a GPU that may not change is shared), and a class's GPUs
    take a shared shape only under its node's y. Added last: the other columns keep their
    positions, and the y cost nothing in any objective."""
    import highspy
    import numpy as np

    first = h.getNumCol()
    ys: dict[tuple[str, int], int] = {}
    for node, reps in sorted(replica_nodes.items()):
        for r in sorted(reps):
            ys[(node, r)] = first + len(ys)
    if not ys:
        return
    n_y = len(ys)
    lower = [1.0 if r in fixed_replicas.get(node, ()) else 0.0 for node, r in ys]
    h.addVars(n_y, np.array(lower), np.ones(n_y))
    h.changeColsIntegrality(
        n_y, np.arange(first, first + n_y), np.full(n_y, highspy.HighsVarType.kInteger, np.uint8)
    )
    for node in sorted(replica_nodes):
        idx = [j for (n, _), j in ys.items() if n == node]
        h.addRow(-highspy.kHighsInf, 1.0, len(idx), np.array(idx), np.ones(len(idx)))
    for j, (key, shape, _) in enumerate(cols):
        if key[4] and shape.mode == "shared":
            y = ys[(key[4], shape.replicas)]
            h.addRow(
                -highspy.kHighsInf, 0.0, 2, np.array([j, y]), np.array([1.0, -len(classes[key])])
            )


# --- greedy baseline ----------------------------------------------------------------------------


def plan_greedy(
    gpus: list[GpuState], demand: dict[str, int], policy: Policy = DEFAULT_POLICY
) -> PlanResult:
    """Largest weighted shortfall first: take a movable unit whose current instances are least
    needed and give it the candidate shape with the most units of the short class."""
    started = time.perf_counter()
    units = _units(gpus, policy)
    chosen = [u.shape for u in units]
    have = supply(gpus)
    on_node: dict[str, list[int]] = defaultdict(list)
    for pos, unit in enumerate(units):
        on_node[unit.gpus[0].node].append(pos)

    goal = dict(demand)  # lowered for classes nothing more can be done for

    def deficit(c: str) -> int:
        return goal.get(c, 0) - have.get(c, 0)

    # Units of one model, shape and cost are interchangeable: judge one per class.
    free: dict[tuple, list[int]] = defaultdict(list)
    for pos, unit in enumerate(units):
        if unit.movable:
            free[(unit.model, len(unit.gpus), unit.shape, unit.cost(2))].append(pos)
    for lst in free.values():
        lst.sort(key=lambda p: (len(units[p].pods), p), reverse=True)  # pop() takes the best
    changes = 0
    while policy.max_changed is None or changes < policy.max_changed:
        short = [c for c in goal if deficit(c) > 0]
        if not short:
            break
        want = max(short, key=lambda c: (deficit(c) * class_weight(c), c))
        best = None
        for key, positions in free.items():
            if not positions:
                continue
            model_key, n, current, _ = key
            model = facts.get_model(model_key)
            shapes = candidate_shapes(model_key, policy.sharing, policy.replica_options)
            offer = [s for s in shapes if units_of(model, s).get(want)]
            if not offer:
                continue
            # What the unit serves today and would stop serving (only demand still met counts).
            loss = sum(
                class_weight(c) * min(k * n, max(0, goal.get(c, 0) - (have[c] - k * n)))
                for c, k in units_of(model, current).items()
            )
            shape = max(offer, key=lambda s: (units_of(model, s)[want], -len(s.devices)))
            gain = class_weight(want) * min(units_of(model, shape)[want] * n, deficit(want))
            if gain > loss and (best is None or (loss, key[3]) < (best[0], best[1][3])):
                best = (loss, key, shape)
        if best is None:
            goal[want] = have.get(want, 0)  # nothing can serve more of it: give up on it
            continue
        _, key, shape = best
        pos = free[key].pop()
        changes += 1
        shape = _node_replicas(on_node[units[pos].gpus[0].node], chosen, pos, shape)
        model = facts.get_model(key[0])
        n = key[1]
        have.subtract({c: k * n for c, k in units_of(model, chosen[pos]).items()})
        have.update({c: k * n for c, k in units_of(model, shape).items()})
        chosen[pos] = shape
    return _result("greedy", gpus, units, chosen, demand, started)


def _node_replicas(node_positions: list[int], chosen: list[Shape], pos: int, shape: Shape) -> Shape:
    """A shared shape takes the replicas of its node's other shared GPUs (one count per node)."""
    if shape.mode != "shared":
        return shape
    others = (chosen[p] for p in node_positions if p != pos)
    return next((s for s in others if s.mode == "shared"), shape)


def result_of(
    method: str,
    gpus: list[GpuState],
    proposed: dict[tuple[str, int], Shape],
    demand: dict[str, int],
) -> PlanResult:
    """A proposal made elsewhere (elastic layouts' changes), as a plan's result: every GPU
    its current shape unless `proposed` names it."""
    units = _units(gpus, Policy(allow_draining=True))
    chosen = [proposed.get((u.gpus[0].node, u.gpus[0].index), u.shape) for u in units]
    return _result(method, gpus, units, chosen, demand, time.perf_counter())


# --- measures -----------------------------------------------------------------------------------


def stranded_slices(gpus: list[GpuState], result: PlanResult) -> int:
    """Free compute slices that cannot host the most requested profile of their model: free
    instances of other profiles plus unpartitioned slices (free = not busy and not needed for
    demand; demand takes instances in GPU order after the busy ones)."""
    wanted: Counter = Counter(result.demand)
    per_model_top: dict[str, str] = {}
    for key in {g.model for g in gpus}:
        slug = facts.get_model(key).slug
        mig = {c: n for c, n in result.demand.items() if c.startswith(f"{slug}-mig-")}
        if mig:
            per_model_top[key] = max(mig, key=lambda c: (mig[c], c))
    for g in gpus:
        for c, n in g.busy:
            wanted[c] -= n
    stranded = 0
    for g in sorted(gpus, key=lambda g: (g.node, g.index)):
        shape = result.proposed.get((g.node, g.index), g.shape)
        if shape.mode != "mig":
            continue
        model = facts.get_model(g.model)
        busy = Counter(dict(g.busy)) if shape == g.shape else Counter()
        used = sum(model.profile(p).compute_slices * n for p, n in shape.devices)
        stranded += model.compute_slices - used
        for p, n in shape.devices:
            c = class_slug(model, "mig", p)
            free = n - min(n, busy[c])
            take = min(free, max(0, wanted[c]))
            wanted[c] -= take
            if c != per_model_top.get(g.model):
                stranded += (free - take) * model.profile(p).compute_slices
    return stranded
