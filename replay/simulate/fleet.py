"""One policy on one fleet, set up as part 1 sets it up on the cluster (`replay/overtime.py`),
with the portal's pure code where the portal decides:

1. nodes time-sliced for the shared asks (c and later), whole nodes as the device plugin's
   sharing config is per node (row j: as many GPUs as the shared demand needs, `shared_gpus`);
2. MIG layouts for the rest from the planner (`scheduler.mig.planner.plan_exact`, what
   `create_plan` runs), asked for the classes' mean demand worth the MIG GPUs
   (`replay.workload.fleet_demand`);
3. the grants from the supply (`replay.workload.split_supply`), each pool's borrowing limit its
   capacity from d on (part 1's `set_pool`), idle units lent;
4. each team's ClusterQueue, the ResourceFlavors and the WorkloadPriorityClasses rendered by
   `scheduler.cluster.render`, from the `QueueLine`s the reconciler would build
   (`scheduler.cluster.reconcile.specs.queue_lines`, over unsaved catalog classes and pools);
5. the Kueue model built from those manifests (fair sharing and the reclaim policy from the
   row's `Policy`), the scheduler model from the layouts.

The DRA row (`Policy.dra`) has no layouts: its nodes are `dra.DraScheduler`'s counter sets,
each pod's MIG placement allocated when it is bound.

Rows f…j (`Policy.slices`, what-ifs the portal does not render yet) differ in steps 3 and 4:
grants, quota lines and transformations in GPU-equivalent slices (`slice_quota`: the counts
read from `catalog.slices`, the grants and lines restated until the portal renders
them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache

from catalog import facts, slices
from catalog.models import Pool, ResourceClass
from catalog.services import catalog_resource_classes
from localcluster.components import scheduler_config
from replay.simulate import dra, elastic, slice_quota
from replay.simulate import kueue as kq
from replay.simulate.engine import Engine, Harness, Job, Result, measure, tie_order
from replay.simulate.scheduler import Pod, Scheduler, gpu_node, resource_name, scoring_weights
from replay.workload import (
    Policy,
    Window,
    ask,
    fleet_demand,
    largest_asks,
    mean_demand,
    split_supply,
    time_sliced_nodes,
    unit_gpus,
)
from scheduler.cluster.reconcile.specs import priority_class_specs
from scheduler.cluster.reconcile.specs import queue_lines as reconciler_queue_lines
from scheduler.cluster.render.kueue import render_cluster_queue
from scheduler.cluster.render.priorities import render_workload_priority_classes
from scheduler.cluster.render.specs import QueueLine, TenantSpec
from scheduler.mig import planner

INSTANCE = "replay"  # part 1's portal instance: its cohort and namespaces
COHORT = f"gpu-portal-{INSTANCE}"  # reconcile.specs.cohort_name() for that instance
DRAIN_LIMIT_S = 7 * 86400  # after the window: time left for the queued work to start


@dataclass(frozen=True)
class Fleet:
    nodes: int
    gpus_per_node: int = 8
    model: str = "B200-180GB"

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass
class Setup:
    policy: Policy
    fleet: Fleet
    node_shapes: list[list[planner.Shape]]
    supply: dict[str, int]
    grants: dict[tuple[int, str], int]
    granted_gpus: dict[int, float]
    reconfigured_gpus: int
    cluster_queues: list[dict]  # as render produced them: the Kueue model reads only these
    priority_classes: list[dict]
    namespaces: list[str] = field(default_factory=list)
    transformations: kq.Transformations = field(default_factory=dict)  # row f only


@cache
def _plan(fleet: Fleet, gpus: int, wanted: tuple[tuple[str, int], ...]) -> tuple:
    """The planner's shapes for the fleet's first `gpus` GPUs, fresh (all whole), in node
    order; cached: rows c, d, e ask the same layout of the same fleet."""
    model = facts.get_model(fleet.model)
    per = fleet.gpus_per_node
    states = [planner.GpuState(f"node-{i // per}", i % per, model.key, planner.WHOLE)
              for i in range(gpus)]  # fmt: skip
    result = planner.plan_exact(states, dict(wanted))
    return tuple(result.proposed[(g.node, g.index)] for g in states), len(result.changed)


def shared_gpus(demand: dict[tuple[int, str], float], model: facts.GpuModel, gpus: int) -> int:
    """Row j's time-sliced GPUs: the shared class's part of what the planner is asked for
    (`fleet_demand`: mean demand scaled to the fleet's worth, rounded up) in whole GPUs of
    `SHARED_REPLICAS` replicas, at least one when anything asks, never all."""
    slug = facts.class_slug(model, "shared")
    replicas = fleet_demand(demand, model, gpus).get(slug, 0)
    return min(gpus - 1, math.ceil(replicas / facts.SHARED_REPLICAS)) if replicas else 0


def layouts(
    policy: Policy, demand: dict[tuple[int, str], float], fleet: Fleet
) -> tuple[list[list[planner.Shape]], int]:
    """Each node's GPU shapes, and how many GPUs were changed from whole. Time-slicing takes
    whole nodes (c…i: the device plugin's sharing config is per node) or, with
    `sized_sharing`, the fleet's last GPUs, as many as the shared demand needs."""
    model = facts.get_model(fleet.model)
    per = fleet.gpus_per_node
    if policy.dra:  # GPUs stay uncut until a claim cuts them: no layout, nothing changed
        return [[planner.WHOLE] * per for _ in range(fleet.nodes)], 0
    shared_slug = facts.class_slug(model, "shared")
    n_shared = 0
    if policy.sharing and policy.sized_sharing:
        n_shared = shared_gpus(demand, model, fleet.gpus)
    elif policy.sharing:
        n_shared = per * time_sliced_nodes(demand, shared_slug, fleet.nodes, per)
    shared = planner.Shape("shared", (), facts.SHARED_REPLICAS)
    rest = fleet.gpus - n_shared
    shapes, changed = [planner.WHOLE] * rest, 0
    if policy.mig and model.mig_capable and rest:
        unshared = {k: v for k, v in demand.items() if k[1] != shared_slug}
        wanted = fleet_demand(unshared, model, rest)
        planned, changed = _plan(fleet, rest, tuple(sorted(wanted.items())))
        shapes = list(planned)
    shapes += [shared] * n_shared
    return [shapes[n * per : (n + 1) * per] for n in range(fleet.nodes)], changed + n_shared


def queue_lines(
    team: int, grants: dict[tuple[int, str], int], supply: dict[str, int], model: facts.GpuModel,
    borrowing: bool, *, unit: str = slices.UNIT_CLASS, unlimited: bool = False,
) -> tuple[QueueLine, ...]:  # fmt: skip
    """The reconciler's own `queue_lines` for the team, over the catalog's classes of the model
    (`catalog_resource_classes`, unsaved: nothing is read from a database): nominal its grant,
    each pool's borrowing limit its capacity from d on (else 0; none where `unlimited`), idle
    units lent; in `unit` (per class, or the classes folded into one line of slices)."""
    classes = {
        pk: ResourceClass(pk=pk, **fields)
        for pk, fields in enumerate(catalog_resource_classes(model), start=1)
        if fields["slug"] in supply
    }
    pools = {
        pk: Pool(
            resource_class=rc,
            capacity=supply[rc.slug],
            borrowing_limit=None if unlimited else supply[rc.slug] if borrowing else 0,
            lend_idle=True,
        )
        for pk, rc in classes.items()
    }
    granted = {pk: grants.get((team, rc.slug), 0) for pk, rc in classes.items()}
    return reconciler_queue_lines(classes, pools, granted, unit=unit)


def set_up(
    window: Window, policy: Policy, fleet: Fleet, teams: int, *, as_cluster: bool = False
) -> Setup:
    """The row's fleet, layouts, grants and rendered queues. `as_cluster`: as part 1's cluster
    replay sets the row up on the portal as it is (calibration): the grants per class as every
    row makes them, folded by the reconciler into one line of slices per model
    (`GPU_QUOTA_UNIT=slices`, the product's default) with Kueue's transformations, the
    borrowing limit the row names (none for unlimited borrowing); fair sharing is the caller's
    (`build`), as it is the cluster's Kueue Configuration."""
    model = facts.get_model(fleet.model)
    demand = mean_demand(window, policy, model)
    shapes, changed = layouts(policy, demand, fleet)
    supply: dict[str, int] = {}
    for node in shapes:
        for shape in node:
            for slug, n in planner.units_of(model, shape).items():
                supply[slug] = supply.get(slug, 0) + n
    grants = split_supply(demand, supply, largest_asks(window, policy, model))
    granted: dict[int, float] = dict.fromkeys(range(teams), 0.0)
    for (team, slug), units in grants.items():
        granted[team] += units * unit_gpus(slug, model)
    names = tuple(sorted({resource_name(model, s) for s in supply}))
    transformations: kq.Transformations = {}
    if as_cluster:
        transformations = slice_quota.transformations(model)
    elif policy.slices:
        transformations = slice_quota.transformations(model)
        by_team = slice_quota.grants(window, policy, model, supply)
        grants = {(team, slice_quota.SLICES): n for team, n in by_team.items()}
        granted = {t: by_team.get(t, 0) / slices.SLICES_PER_GPU for t in range(teams)}
        capacity = sum(by_team.values())
    queues, namespaces = [], []
    for team in range(teams):
        lines = queue_lines(
            team, grants, supply, model, policy.borrowing,
            unit=slices.UNIT_SLICES if as_cluster else slices.UNIT_CLASS,
            unlimited=as_cluster and policy.unlimited_borrowing,
        )  # fmt: skip
        if policy.slices and not as_cluster:
            grant = by_team.get(team, 0)
            lines = slice_quota.lines(model, grant, capacity, policy.borrowing)
        spec = TenantSpec(
            slug=f"{policy.key}-team-{team + 1}",
            name=f"Replay {policy.key} team {team + 1}",
            active=True,
            gpu_quota={},
            gpu_resource_names=names,
            allowed_priority_classes=("gpu-high", "gpu-low"),
            instance=INSTANCE,
            queue_lines=lines,
            cohort=COHORT,
        )
        namespace = f"{INSTANCE}-{spec.slug}"
        namespaces.append(namespace)
        manifest = render_cluster_queue(spec, namespace)
        what_if = policy.slices and not as_cluster
        queues.append(slice_quota.what_if_queue(manifest, policy) if what_if else manifest)
    return Setup(
        policy=policy,
        fleet=fleet,
        node_shapes=shapes,
        supply=supply,
        grants=grants,
        granted_gpus=granted,
        reconfigured_gpus=changed,
        cluster_queues=queues,
        priority_classes=render_workload_priority_classes(priority_class_specs()),
        namespaces=namespaces,
        transformations=transformations,
    )


def build(
    setup: Setup, window: Window, harness: Harness, seed: int = 0, *, fair_sharing: bool = False
) -> Engine:
    """The engine for a setup: Kueue from the rendered manifests, nodes from the layouts."""
    model = facts.get_model(setup.fleet.model)
    queues = [kq.cluster_queue(m) for m in setup.cluster_queues]
    p = setup.policy
    kueue = kq.Kueue(
        queues,
        fair_sharing=fair_sharing or p.fair_sharing,
        grace_s=p.grace_s,
        victims_by_work_lost=p.victims_by_work_lost,
    )
    values = kq.priorities(setup.priority_classes)
    sched: Scheduler
    if p.dra:
        per = setup.fleet.gpus_per_node
        sched = dra.DraScheduler(
            [dra.dra_node(f"node-{n}", model, per) for n in range(setup.fleet.nodes)], model
        )
    else:
        nodes = [gpu_node(f"node-{n}", model, shapes) for n, shapes in enumerate(setup.node_shapes)]
        sched = Scheduler(nodes, scoring_weights(scheduler_config()))
    jobs = []
    for pod in window.pods:
        a = ask(pod, setup.policy, model)
        name = resource_name(model, a.slug)
        queue = setup.namespaces[pod.team]
        resource, units = kq.transform(name, a.units, setup.transformations)
        jobs.append(
            Job(
                pod=pod,
                team=pod.team,
                gpu_eq=a.units * a.slices_per_unit / model.compute_slices,
                slices=a.units * a.slices_per_unit,
                workload=kq.Workload(pod.name, queue, resource, units, values[a.priority], 0.0),
                kpod=Pod(pod.name, name, a.units, values[a.priority], 0.0),
            )
        )
    tie_order(jobs, harness.clock_resolution_s, seed)

    def refuse(job: Job) -> bool:
        w = job.workload
        return not kueue.can_ever_fit(kueue.queues[w.queue], w.resource, w.units)

    loop = elastic.Loop(model, elastic.Settings()) if p.elastic_layouts else None
    return Engine(jobs, kueue, sched, refuse, harness, loop)


def simulate(
    window: Window,
    setup: Setup,
    harness: Harness | None = None,
    seed: int = 0,
    give_up: tuple[float, float] | None = None,
    **kw,
) -> Result:
    """`give_up`: stop once that wait quantile is sure to be exceeded (`Engine.run`)."""
    engine = build(setup, window, harness or Harness(), seed, **kw)
    engine.run(window.length + DRAIN_LIMIT_S, give_up)
    model = facts.get_model(setup.fleet.model)
    return measure(engine, window.length, setup.fleet.gpus, model.compute_slices)
