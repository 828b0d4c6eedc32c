"""Layouts that follow the queue (pure: no Django, no I/O).

A periodic task reads the fleet (per GPU: shape and what running pods hold) and the asks that
wait for a shape (admitted by Kueue but not placed: no node offers the profile), and asks the
planner to re-shape *idle* GPUs only, so that no running workload is ever disturbed:

- **hysteresis**: nothing moves until some ask has waited `min_wait_s` for a shape the layout
  lacks; a burst that the next finishing pod would serve does not reshuffle GPUs;
- **disruption budget**: at most `max_gpus_per_hour` GPUs re-shaped per pool in any hour (the
  caller counts what it changed in the last hour);
- **pause**: a pool's elastic layouts can be paused; the console's manual plans stay.

The planner is `plan_greedy` (a person's rule, fast enough to run every minute): its demand is
what runs now plus what waits, so idle instances nobody holds or waits for are the first it
re-shapes, and its budget stops it after `max_gpus_per_hour` minus what was spent.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from catalog import facts
from scheduler.mig import planner


@dataclass(frozen=True)
class ElasticPolicy:
    min_wait_s: float = 10 * 60  # an ask must have waited this long for a shape
    max_gpus_per_hour: int = 4  # the disruption budget, GPUs re-shaped per rolling hour
    paused: bool = False

    def problems(self) -> dict[str, str]:
        """What a platform team must change before this policy can be saved (field -> words)."""
        out = {}
        if self.min_wait_s < 0:
            out["min_wait_s"] = "must be 0 or more seconds"
        if self.max_gpus_per_hour < 1 and not self.paused:
            out["max_gpus_per_hour"] = (
                "must be at least 1 while elastic layouts are on; pause them instead"
            )
        return out


@dataclass(frozen=True)
class WaitingAsk:
    slug: str  # the resource class it asks for (a MIG profile, whole, shared)
    units: int
    waited_s: float


@dataclass(frozen=True)
class Change:
    node: str
    index: int
    before: planner.Shape
    after: planner.Shape

    def words(self) -> str:
        return f"{self.node} GPU {self.index}: {self.before.label()} → {self.after.label()}"


@dataclass
class Decision:
    changes: list[Change] = field(default_factory=list)
    skipped: str = ""  # why nothing changes, in words; empty when something does
    demand: dict[str, int] = field(default_factory=dict)  # what the planner was asked for
    short: dict[str, int] = field(default_factory=dict)  # class -> units waited for, unserved

    def reason(self, model: facts.GpuModel | None = None) -> str:
        """One line for the audit log and the console."""
        if not self.changes:
            return self.skipped
        waited = ", ".join(f"{n} × {_name(c, model)}" for c, n in sorted(self.short.items()))
        moves = "; ".join(c.words() for c in self.changes)
        return f"waiting for a shape the layout lacked: {waited}. {moves}"


def _name(slug: str, model: facts.GpuModel | None) -> str:
    if model is not None and slug.startswith(f"{model.slug}-mig-"):
        return slug.removeprefix(f"{model.slug}-mig-")
    return slug


def decide(
    gpus: list[planner.GpuState],
    waiting: list[WaitingAsk],
    policy: ElasticPolicy,
    changed_last_hour: int = 0,
    nodes: frozenset[str] | None = None,
) -> Decision:
    """Which idle GPUs to re-shape now, and why; or, with no change, why not. `nodes`: the
    only nodes that may change (the pool's, less any node a rollout is changing now)."""
    if policy.paused:
        return Decision(skipped="elastic layouts are paused for this pool")
    gpus = [_pinned(g) if _fixed_shape(g) else g for g in gpus]
    supply = planner.supply(gpus)
    busy: Counter = Counter()
    for g in gpus:
        busy.update(dict(g.busy))
    wanted = Counter(busy)
    aged: Counter = Counter()
    for w in waiting:
        wanted[w.slug] += w.units
        if w.waited_s >= policy.min_wait_s:
            aged[w.slug] += w.units
    # Short: asks that waited long enough, for a class whose instances are all held or waited
    # for. Waiting that the layout could serve (the pod is about to be placed) moves nothing.
    short = {c: min(n, wanted[c] - supply.get(c, 0)) for c, n in aged.items()}
    short = {c: n for c, n in short.items() if n > 0}
    gangs = [
        w for w in sorted(waiting, key=lambda w: -w.waited_s)
        if w.units > 1 and w.waited_s >= policy.min_wait_s and not _fits_a_node(gpus, w)
    ]  # fmt: skip
    for w in gangs:  # several units on one node: the count can be there, the node not
        short[w.slug] = max(short.get(w.slug, 0), w.units)
    demand = {c: n for c, n in wanted.items() if n > 0}
    if not short:
        minutes = policy.min_wait_s / 60
        return Decision(
            skipped=f"no ask has waited {minutes:g} min for a shape the layout lacks",
            demand=demand,
        )
    budget = policy.max_gpus_per_hour - changed_last_hour
    if budget <= 0:
        return Decision(
            skipped=f"the disruption budget is spent: {changed_last_hour} of "
            f"{policy.max_gpus_per_hour} GPUs re-shaped in the last hour",
            demand=demand,
            short=short,
        )
    changes, reserved = _one_node_changes(gpus, gangs, nodes, budget)
    if len(changes) < budget:
        # The rest of the budget to the planner, on the nodes not being made ready for an
        # ask of several units (else it would undo them: it balances fleet-wide counts).
        everywhere = {g.node for g in gpus} if nodes is None else set(nodes)
        result = planner.plan_greedy(
            gpus,
            demand,
            planner.Policy(
                nodes=frozenset(everywhere - reserved), max_changed=budget - len(changes)
            ),
        )
        by_key = {(g.node, g.index): g for g in gpus}
        changes += [
            Change(node, index, by_key[(node, index)].shape, result.proposed[(node, index)])
            for node, index in result.changed
        ]
    if not changes:
        return Decision(
            skipped="no idle GPU can take a shape that serves what waits", demand=demand,
            short=short,
        )  # fmt: skip
    return Decision(changes=changes, demand=demand, short=short)


def _fixed_shape(g: planner.GpuState) -> bool:
    """A shape the planner cannot make on this model (a MIG-capable GPU time-sliced by the
    sharing plan): elastic layouts leave it to the plan that made it."""
    return g.shape not in planner.candidate_shapes(
        g.model, "time-slicing", (facts.SHARED_REPLICAS,)
    ) and not (g.shape.mode == "shared" and not facts.get_model(g.model).mig_capable)


def _pinned(g: planner.GpuState) -> planner.GpuState:
    """The GPU as the planner must see it to leave it be: every unit of it held."""
    held = planner.units_of(facts.get_model(g.model), g.shape)
    return replace(g, busy=tuple(sorted(held.items())))


def _most_of(model: facts.GpuModel, slug: str) -> tuple[planner.Shape, int]:
    """The shape that offers the most units of a class on one GPU of the model, and how many."""
    offers = [
        (planner.units_of(model, shape).get(slug, 0), shape)
        for shape in planner.candidate_shapes(model.key, "time-slicing", (facts.SHARED_REPLICAS,))
    ]
    n, shape = max(offers, key=lambda o: o[0])
    return shape, n


def _free_on_node(node_gpus: list[planner.GpuState], slug: str) -> int:
    return sum(
        planner.units_of(facts.get_model(g.model), g.shape).get(slug, 0) - dict(g.busy).get(slug, 0)
        for g in node_gpus
    )


def _fits_a_node(gpus: list[planner.GpuState], ask: WaitingAsk) -> bool:
    per_node: dict[str, list[planner.GpuState]] = {}
    for g in gpus:
        per_node.setdefault(g.node, []).append(g)
    return any(_free_on_node(n, ask.slug) >= ask.units for n in per_node.values())


def _one_node_changes(
    gpus: list[planner.GpuState],
    gangs: list[WaitingAsk],
    nodes: frozenset[str] | None,
    budget: int,
) -> tuple[list[Change], set[str]]:
    """Asks of several units that must share a node (a pod's GPUs are on one node) and that no
    node can take: the node that needs the fewest idle GPUs re-shaped is reserved for the
    oldest such ask and gets as many of them as the budget allows (the rest at the next runs:
    the planner is kept off a reserved node meanwhile). The fleet-wide counts the planner
    balances cannot see this: eight whole GPUs free on eight nodes do not run an 8-GPU pod."""
    per_node: dict[str, list[planner.GpuState]] = {}
    for g in gpus:
        per_node.setdefault(g.node, []).append(g)
    changes: list[Change] = []
    reserved: set[str] = set()
    for ask in gangs:
        best: tuple[str, list[Change]] | None = None
        for node, node_gpus in sorted(per_node.items()):
            if node in reserved or (nodes is not None and node not in nodes):
                continue
            model = facts.get_model(node_gpus[0].model)  # a node's GPUs are of one model
            shape, per_gpu = _most_of(model, ask.slug)
            if not per_gpu:
                continue
            free, need = _free_on_node(node_gpus, ask.slug), []
            for g in sorted(node_gpus, key=lambda g: g.index):
                if free >= ask.units:
                    break
                if not g.busy and not planner.units_of(model, g.shape).get(ask.slug, 0):
                    need.append(Change(node, g.index, g.shape, shape))
                    free += per_gpu
            if free >= ask.units and (best is None or len(need) < len(best[1])):
                best = (node, need)
        if best is None:
            continue
        reserved.add(best[0])
        take = best[1][: max(0, budget - len(changes))]
        changes += take
    return changes, reserved
