"""Part 1 of the replay: the trace's pods over time through the portal, on the local cluster.

For each policy, on a fleet of fresh fake GPU nodes of its own (a model no seed node has, so the
tests' nodes never take its pods): the teams' grants are made with the portal's services, their
queues rendered by the reconciler, MIG layouts proposed by the planner and rolled out by the
portal's rollout (the simulator plays NVIDIA's MIG manager); then every pod is submitted through
`submit_workload` and created by `create_in_cluster` (the worker's task body) at its arrival time,
compressed, as a Job whose command is `sleep <run time>`: the local cluster's KWOK stages run it
for that long. Kueue admits, queues, borrows and preempts; the scheduler places. A watch stamps
each pod's Running, end and preemption with the wall clock; `metrics.measure` does the rest.

Runs as its own portal instance (`replay`, namespaces `replay-…`) in a throwaway database, and
deletes its namespaces, queues and nodes at the end.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test import override_settings
from kubernetes import client

from catalog import facts
from catalog import services as catalog
from catalog.models import Pool, ResourceClass
from catalog.services import ensure_resource_classes
from core.errors import ServiceError
from localcluster import fleet
from localcluster import gpu_layout as gl
from replay import metrics
from replay.pod_watch import PodWatch
from replay.simulate.rows import CLUSTER_ROWS
from replay.workload import (
    Policy,
    ReplayPod,
    Window,
    ask,
    fleet_demand,
    largest_asks,
    mean_demand,
    split_supply,
    time_sliced_nodes,
    unit_gpus,
)
from scheduler.cluster import inventory
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.mig import proposals, rollout
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import sync
from scheduler.workloads.queue import reclaim
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import Tenant
from tenants.services import grants as grant_services
from tenants.services import tenants as tenant_services

NODE_PREFIX = "replay-"
NODE_LABEL = "gpu-portal.local/replay"
IMAGE = "registry.k8s.io/pause:3.10"
MIN_RUN_S = 0.05  # a KWOK delay of 0 would end the pod at once: the shortest run we ask
SUBMITTERS = 4  # clients submitting at once
RECLAIM_PERIOD_S = 30.0  # the reclaim pass's beat period (RECLAIM_EVERY_S), in trace time
RECLAIM_MIN_PERIOD_S = 0.5  # a pass lists every queue and workload: no faster than this


@dataclass
class FleetConfig:
    nodes: int = 4
    gpus_per_node: int = 8
    model: str = "B200-180GB"

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_names(self, policy: str) -> list[str]:
        """Names of the policy's own: a pod of the last policy still being deleted never
        counts on the next one's nodes."""
        instance = settings.PORTAL_INSTANCE
        return [
            f"{NODE_PREFIX}{instance}-{policy}-{self.model.lower()}-{i}" for i in range(self.nodes)
        ]


@dataclass
class PolicyRun:
    policy: Policy
    measured: metrics.Measured
    submitted: int
    refused: int
    reconfigured_gpus: int
    granted_gpus: dict[int, float]
    late_s: float  # the most a submit ran behind its arrival time (wall seconds)
    setup_s: float
    notes: list[str] = field(default_factory=list)
    run_id: str = ""
    compression: float = 0.0
    jobs: list[metrics.JobRecord] = field(default_factory=list)  # what the watch saw, per job


# --- the fleet --------------------------------------------------------------------------------


def make_fleet(
    admin: KubeGateway, api: client.ApiClient, cfg: FleetConfig, policy: str, shared_nodes: int
) -> None:
    """Fresh nodes: MIG off everywhere, the last `shared_nodes` time-sliced (4 replicas per GPU,
    advertised as nvidia.com/gpu.shared)."""
    delete_fleet(admin)
    names = cfg.node_names(policy)
    for i, name in enumerate(names):
        spec = {
            "name": name,
            "model": cfg.model,
            "gpus": cfg.gpus_per_node,
            "migConfig": "all-disabled",
            "devicePluginConfig": "time-sliced-4-renamed"
            if i >= len(names) - shared_nodes
            else "default",
            "labels": {NODE_LABEL: settings.PORTAL_INSTANCE},
        }
        admin.create(fleet.node_manifest(spec))
    fleet.wait_nodes_ready(api, names)


def fleet_selector() -> str:
    """This portal instance's replay nodes: another instance replaying on the same cluster (a
    second test run) keeps its own."""
    return f"{NODE_LABEL}={settings.PORTAL_INSTANCE}"


def delete_fleet(admin: KubeGateway, timeout: float = 60) -> None:
    for node in admin.list("Node", label_selector=fleet_selector()):
        admin.delete("Node", node["metadata"]["name"])
    deadline = time.monotonic() + timeout
    while admin.list("Node", label_selector=fleet_selector()) and time.monotonic() < deadline:
        time.sleep(0.2)


# --- one policy -------------------------------------------------------------------------------


def _roll_out_mig(kube: KubeGateway, admin_user, demand: dict[str, int], nodes: list[str]) -> int:
    """The planner's layouts for the grants, rolled out by the portal; GPUs changed."""
    plan = proposals.create_plan(actor=admin_user, nodes=nodes, demand=demand)
    changed = int(plan.summary.get("changed_gpus", 0))
    if changed:
        plan = rollout.apply_plan(kube, plan.pk, actor=admin_user)
        failed = [n for n in plan.nodes if n.get("state") == "failed"]
        if failed:
            raise RuntimeError(
                f"the MIG rollout failed on {failed[0]['node']}: {failed[0]['message']}"
            )
    return changed


def borrowing_limit(policy: Policy, capacity: int) -> int | None:
    """The pool's borrowing limit a row means: none (Kueue: unlimited), up to the pool, or 0."""
    if policy.unlimited_borrowing:
        return None
    return capacity if policy.borrowing else 0


def grace_wall_s(policy: Policy, compression: float) -> int:
    """The row's reclaim grace in wall seconds (whole, as the portal stores it; at least 1
    where the row has one, so a short grace never turns into Kueue's immediate reclaim)."""
    if not policy.grace_s:
        return 0
    return max(1, round(policy.grace_s / compression))


def _reclaim_controller(
    kube: KubeGateway, period_s: float, stop: threading.Event, failed: list[str]
) -> None:
    """The portal's reclaim pass (beat runs it every 30 s), at the replay's compressed pace. A
    pass that fails is noted in `failed` (the run's notes), and the next one runs as beat's
    would."""
    try:
        while not stop.wait(period_s):
            try:
                reclaim.reclaim_borrowed_units(kube)
            except Exception as exc:  # noqa: BLE001 - said in the run's notes, not lost
                failed.append(f"a reclaim pass failed: {exc}")
    finally:
        connection.close()  # this thread's


def _grant(admin_user, tenants: list[Tenant], grants: dict[tuple[int, str], int]) -> None:
    classes = {rc.slug: rc for rc in ResourceClass.objects.filter(slug__in={s for _, s in grants})}
    for (team, slug), units in sorted(grants.items()):
        if units > 0:
            grant_services.grant_quota(
                actor=admin_user, tenant=tenants[team], resource_class=classes[slug], amount=units
            )


def run_policy(
    policy: Policy,
    window: Window,
    *,
    compression: float,
    cfg: FleetConfig,
    teams: int,
    kube: KubeGateway,
    admin: KubeGateway,
    api: client.ApiClient,
    admin_user,
    progress: Callable[[str], None] = print,
    run_id: str = "",
) -> PolicyRun:
    """One run of `policy`; `run_id` (default: the policy's letter) names its nodes, teams and
    namespaces, so a repeat never meets what an earlier run is still deleting."""
    run_id = run_id or policy.key
    setup_started = time.monotonic()
    model = facts.get_model(cfg.model)
    notes: list[str] = []
    demand = mean_demand(window, policy, model)
    shared_slug = facts.class_slug(model, "shared")
    shared_nodes = (
        time_sliced_nodes(demand, shared_slug, cfg.nodes, cfg.gpus_per_node)
        if policy.sharing
        else 0
    )
    progress(
        f"[{run_id}] fleet: {cfg.nodes} × {cfg.gpus_per_node} {cfg.model}, "
        f"{shared_nodes} node(s) time-sliced"
    )
    make_fleet(admin, api, cfg, run_id, shared_nodes)
    inventory.sync_inventory(kube)
    reconfigured = shared_nodes * cfg.gpus_per_node
    if policy.mig:
        # the platform team asks the planner for the classes' demand, worth the MIG nodes
        unshared = {k: v for k, v in demand.items() if k[1] != shared_slug}
        mig_gpus = (cfg.nodes - shared_nodes) * cfg.gpus_per_node
        wanted_layout = fleet_demand(unshared, model, mig_gpus)
        mig_nodes = cfg.node_names(run_id)[: cfg.nodes - shared_nodes]
        progress(f"[{run_id}] planning MIG layouts for {wanted_layout}")
        reconfigured += _roll_out_mig(kube, admin_user, wanted_layout, mig_nodes)
        inventory.sync_inventory(kube)
    supply = {
        p.resource_class.slug: p.capacity
        for p in Pool.objects.select_related("resource_class").filter(
            resource_class__slug__startswith=model.slug
        )
    }
    wanted = split_supply(demand, supply, largest_asks(window, policy, model))
    for pool in Pool.objects.filter(resource_class__slug__startswith=model.slug):
        catalog.set_pool(
            actor=admin_user,
            resource_class=pool.resource_class,
            borrowing_limit=borrowing_limit(policy, pool.capacity),
            lend_idle=True,
            # every setting the row names is set, not left to the product's defaults: a grace
            # of 0 is Kueue's own immediate reclaim (what a…g mean), above 0 the portal's
            # controller reclaims, run here (`_replay`) as beat runs it
            reclaim_grace_s=grace_wall_s(policy, compression),
        )
    tenants = [
        tenant_services.create_tenant(
            actor=admin_user,
            slug=f"{run_id}-team-{i + 1}",
            name=f"Replay {run_id} team {i + 1}",
            allowed_priority_classes=["gpu-high", "gpu-low"],
            gpu_ceiling=Decimal(cfg.gpus),  # the grants below are the limit, not a ceiling
        )
        for i in range(teams)
    ]
    try:
        return _replay(policy, window, compression, cfg, kube, api, admin_user, tenants, wanted,
                       reconfigured, setup_started, notes, progress, run_id)  # fmt: skip
    finally:
        clean_up(kube, tenants, admin_user)


def _replay(
    policy: Policy,
    window: Window,
    compression: float,
    cfg: FleetConfig,
    kube: KubeGateway,
    api: client.ApiClient,
    admin_user,
    tenants: list[Tenant],
    wanted: dict[tuple[int, str], int],
    reconfigured: int,
    setup_started: float,
    notes: list[str],
    progress: Callable[[str], None],
    run_id: str,
) -> PolicyRun:
    model = facts.get_model(cfg.model)
    _grant(admin_user, tenants, wanted)
    for tenant in tenants:
        reconcile_tenant(kube, tenant.pk)
    granted_gpus: dict[int, float] = defaultdict(float)
    for (team, slug), units in wanted.items():
        granted_gpus[team] += units * unit_gpus(slug, model)
    setup_s = time.monotonic() - setup_started

    prefix = f"{settings.TENANT_NAMESPACE_PREFIX}{run_id}-"
    horizon = window.length / compression
    progress(f"[{run_id}] replaying {len(window.pods)} pods over {horizon:.0f} s")
    t0 = time.monotonic()
    watcher = PodWatch(api, prefix, t0)
    watcher.start()
    stop_reclaim = threading.Event()
    if policy.grace_s:
        period = max(RECLAIM_MIN_PERIOD_S, RECLAIM_PERIOD_S / compression)
        threading.Thread(
            target=_reclaim_controller, args=(kube, period, stop_reclaim, notes), daemon=True,
            name="replay-reclaim",
        ).start()  # fmt: skip
    records: dict[int, metrics.JobRecord] = {}
    lateness: list[float] = []
    lock = threading.Lock()

    def submit(pod: ReplayPod, due: float) -> None:
        """One CI client's submit: the service layer, then the worker's task body."""
        a = ask(pod, policy, model)
        submitted = time.monotonic() - t0
        try:
            w = workloads.submit_workload(
                actor=admin_user,
                tenant=tenants[pod.team],
                spec=workload_spec(
                    name=pod.name,
                    kind="job",
                    image=IMAGE,
                    resources={a.slug: a.units},
                    priority=a.priority,
                    command=["sleep", f"{max(MIN_RUN_S, pod.run / compression):.3f}"],
                ),
            )
            sync.create_in_cluster(kube, w.pk)
        except ServiceError as exc:  # a refusal (409: over the grant for good) is a result too
            with lock:
                notes.append(f"{pod.name} refused: {exc}")
            return
        finally:
            connection.close()  # this thread's; a pool thread is not Django's to clean up
        with lock:
            lateness.append(submitted - due)
            records[w.pk] = metrics.JobRecord(
                pod.name, pod.team, a.slices_per_unit * a.units, pod.milli, submitted
            )

    # Several clients submit at once, as CI pipelines do: a burst of arrivals is not
    # serialised behind one client's round trips.
    with ThreadPoolExecutor(max_workers=SUBMITTERS, thread_name_prefix="replay-submit") as pool:
        pending = []
        for n, pod in enumerate(sorted(window.pods, key=lambda p: (p.arrival, p.name))):
            due = pod.arrival / compression
            wait = due - (time.monotonic() - t0)
            if wait > 0:
                time.sleep(wait)
            pending.append(pool.submit(submit, pod, due))
            if n and n % 100 == 0:
                progress(f"[{run_id}] {n} arrived at {time.monotonic() - t0:.0f} s")
        for future in pending:
            future.result()  # anything but a refusal stops the replay with its error
    refused = len(window.pods) - len(records)
    late = max(lateness, default=0.0)
    rest = horizon - (time.monotonic() - t0)
    if rest > 0:
        time.sleep(rest)
    seen = watcher.stop()
    stop_reclaim.set()
    for pod_seen in seen.values():
        job = records.get(pod_seen.workload)
        if job is None or pod_seen.running is None:
            continue
        job.runs.append((pod_seen.running, pod_seen.ended))
        if pod_seen.outcome == "succeeded":
            job.finished = pod_seen.ended
        elif pod_seen.outcome == "preempted":
            job.preemptions += 1
    for job in records.values():
        job.runs.sort()
    measured = metrics.measure(
        list(records.values()),
        horizon=horizon,
        compression=compression,
        fleet_gpus=cfg.gpus,
        slices_per_gpu=model.compute_slices,
        granted_gpus=dict(granted_gpus),
    )
    progress(
        f"[{run_id}] allocation {measured.alloc_slices:.1%} by slices, "
        f"{measured.alloc_milli:.1%} by milli; {measured.started} started, "
        f"{measured.not_started} waiting, {refused} refused, {measured.preemptions} preempted; "
        f"submits ran up to {late:.1f} s behind their arrival times"
    )
    for note in notes[:5]:
        progress(f"[{run_id}]   {note}")
    return PolicyRun(
        policy,
        measured,
        len(records),
        refused,
        reconfigured,
        dict(granted_gpus),
        late,
        setup_s,
        notes,
        run_id=run_id,
        compression=compression,
        jobs=sorted(records.values(), key=lambda j: j.submitted),
    )


def clean_up(kube: KubeGateway, tenants: list[Tenant], admin_user, timeout: float = 60) -> None:
    """End the run's teams (their grants end with them) and delete what they left; wait a
    while for it to go, so the next run starts on a quieter cluster (its names differ, so it
    never meets what is still being deleted)."""
    for tenant in tenants:
        tenant_services.change_tenant_status(actor=admin_user, tenant=tenant, action="archive")
        kube.delete("Namespace", tenant.namespace)
        kube.delete("ClusterQueue", tenant.namespace)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(kube.get("Namespace", t.namespace) for t in tenants):
        time.sleep(0.5)


def run_all(
    window: Window,
    policies: list[str],
    *,
    compression: float,
    cfg: FleetConfig,
    teams: int,
    kubeconfig: str,
    admin_kubeconfig: str,
    progress: Callable[[str], None] = print,
) -> list[PolicyRun]:
    gl.model_info(cfg.model)  # a clear error for a model the local fleet cannot play
    kube = KubeGateway.from_kubeconfig(kubeconfig)
    admin = KubeGateway.from_kubeconfig(admin_kubeconfig)
    api = admin.api
    ensure_resource_classes([cfg.model])
    user = get_user_model().objects.create_superuser("replay-admin", "", None)
    user.groups.add(Group.objects.get_or_create(name=settings.PLATFORM_ADMIN_GROUP)[0])
    runs = []
    # GPUs are what the replay measures: CPU, memory and pod counts never hold a team back
    unbounded = override_settings(
        TENANT_CPU_QUOTA="100000", TENANT_MEMORY_QUOTA="1000Ti", TENANT_POD_QUOTA=100_000
    )
    try:
        unbounded.enable()
        for n, key in enumerate(policies):
            repeat = policies[:n].count(key)  # 0 for the first run of a policy
            runs.append(
                run_policy(
                    CLUSTER_ROWS[key],
                    window,
                    compression=compression,
                    cfg=cfg,
                    teams=teams,
                    kube=kube,
                    admin=admin,
                    api=api,
                    admin_user=user,
                    progress=progress,
                    run_id=f"{key}{repeat + 1}" if repeat else key,
                )
            )
    finally:
        unbounded.disable()
        delete_fleet(admin)
    return runs
