"""A fleet's part of a reconcile (issue 54). On the manager: MultiKueue's objects for the
placements in use (render/multikueue.py: each worker a MultiKueueCluster, each placement an
AdmissionCheck and MultiKueueConfig, a copy of a kubeconfig Secret kept outside Kueue's
namespace). On each worker: the cluster-wide objects (flavors, priorities, guards) and, for
every team whose work may run there, what it has on the manager (namespace, access,
guardrails, LocalQueue and ClusterQueue), the ClusterQueue without the dispatch check: the
worker runs what MultiKueue sends it, within the same grant.

Each worker is converged on its own and recorded as a run of its own (`worker <name>`): one
that does not answer is said there and repaired by the next periodic run, and the others and
the manager go on. A single-cluster install registers no fleet and nothing here runs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from django.conf import settings
from django.utils import timezone

from core.errors import ClusterError
from scheduler.cluster import dispatch, doors
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster, ReconcileRun
from scheduler.cluster.reconcile.converge import (
    Outcome,
    _terminating,
    converge,
    execute,
    is_managed,
    key_str,
    managed_selector,
    plan_converge,
)
from scheduler.cluster.reconcile.runs import ensure_cluster_objects
from scheduler.cluster.reconcile.specs import build_specs
from scheduler.cluster.render.labels import (
    HASH_ANNOTATION,
    NAMESPACED_KINDS,
    TENANT_CLUSTER_KINDS,
    TENANT_LABEL,
    object_key,
)
from scheduler.cluster.render.multikueue import render_kubeconfig_secret, render_manager
from scheduler.cluster.render.specs import TenantSpec
from scheduler.cluster.render.tenant import render_tenant
from tenants.models import Tenant

log = logging.getLogger(__name__)

MULTIKUEUE_KINDS = ("MultiKueueCluster", "AdmissionCheck", "MultiKueueConfig")


def has_fleet() -> bool:
    """Whether this install is a fleet (a manager or workers registered): else nothing here
    runs, and a single cluster makes no call more than before."""
    return (
        Cluster.objects.active()
        .filter(role__in=(Cluster.Role.MANAGER, Cluster.Role.WORKER))
        .exists()
    )


def manager_desired(plan: dispatch.FleetPlan) -> list[dict]:
    """Secret copies first (a MultiKueueCluster reads its Secret), then render_manager's."""
    namespace, instance = settings.KUEUE_CONFIG_NAMESPACE, settings.PORTAL_INSTANCE
    copies = [
        render_kubeconfig_secret(
            worker.name, doors.kubeconfig_text(worker), namespace=namespace, instance=instance
        )
        for worker in plan.copies()
    ]
    return [*copies, *render_manager(plan.targets(), instance)]


def reconcile_manager(home: KubeGateway, plan: dispatch.FleetPlan) -> Outcome:
    """Converge MultiKueue's objects of this portal instance on the manager; those of a
    placement no longer in use are pruned (Kueue keeps a check in use by a queue anyway)."""
    desired = manager_desired(plan)
    selector = managed_selector()
    live = [obj for kind in MULTIKUEUE_KINDS for obj in home.list(kind, label_selector=selector)]
    # The portal may not list Secrets (the chart's Role: get and patch, in Kueue's namespace
    # only): each copy it wants is read by name, and a copy no longer wanted is left.
    for copy in (m for m in desired if m["kind"] == "Secret"):
        found = home.get("Secret", copy["metadata"]["name"], copy["metadata"]["namespace"])
        live += [found] if found else []
    previously = {key_str(m): m["metadata"]["annotations"][HASH_ANNOTATION] for m in desired}
    plan_ = plan_converge(desired, live, previously)
    plan_.to_delete = [obj for obj in plan_.to_delete if obj.get("kind") != "Secret"]
    return execute(home, plan_)


def _live_by_tenant(kube: KubeGateway, slugs: set[str] | None) -> dict[str, list[dict]]:
    """The portal's objects of each team on a worker, by team; only these teams' namespaces
    when `slugs` is given (a single team's run), every managed object otherwise."""
    selector = managed_selector()
    out: dict[str, list[dict]] = {}
    listed: list[dict] = []
    if slugs is None:
        for kind in ("Namespace", *NAMESPACED_KINDS, *TENANT_CLUSTER_KINDS):
            listed += kube.list(kind, label_selector=selector)
    else:
        for one in slugs:
            team = f"{selector},{TENANT_LABEL}={one}"
            listed += kube.list("Namespace", label_selector=team)
            for kind in (*NAMESPACED_KINDS, *TENANT_CLUSTER_KINDS):
                listed += kube.list(kind, label_selector=team)
    for obj in listed:
        owner = (obj["metadata"].get("labels") or {}).get(TENANT_LABEL)
        if owner and is_managed(obj):
            out.setdefault(owner, []).append(obj)
    return out


def _remove(kube: KubeGateway, objects: list[dict], why: str, out: Outcome) -> None:
    """A team's namespace (with all in it) and its cluster-scoped queue on a worker."""
    for obj in objects:
        if obj["kind"] in ("Namespace", *TENANT_CLUSTER_KINDS) and not _terminating(obj):
            kind, _, name = object_key(obj)
            if kube.delete(kind, name):
                out.changes.append(f"{kind}/{name}: deleted ({why})")


def reconcile_worker(
    worker: Cluster, plan: dispatch.FleetPlan, tenant_ids: set[int] | None = None
) -> Outcome:
    """Converge one worker: every team placed on it (or only `tenant_ids`), and remove the
    teams that may no longer run there."""
    kube = doors.door(worker.name)
    kube.support.require()
    ensure_cluster_objects(kube)
    allowed = plan.tenants_on(worker.name)
    wanted = allowed if tenant_ids is None else allowed & tenant_ids
    # a suspended team keeps its namespace, as on the manager; an archived one loses it
    tenants = list(Tenant.objects.filter(pk__in=wanted).exclude(status=Tenant.Status.ARCHIVED))
    scope = None
    if tenant_ids is not None:
        scope = set(Tenant.objects.filter(pk__in=tenant_ids).values_list("slug", flat=True))
    live = _live_by_tenant(kube, scope)
    specs = build_specs(tenants, frameworks=kube.kueue_settings.verdict().usable)
    out = Outcome()
    for tenant in tenants:
        done = converge(
            kube, render_tenant(worker_spec(specs[tenant.pk])), live.pop(tenant.slug, []), {}
        )
        out.changes += done.changes
        out.drift += done.drift
    for slug, objects in live.items():
        _remove(kube, objects, f"{slug} no longer runs on {worker.name}", out)
    return out


def worker_spec(spec: TenantSpec) -> TenantSpec:
    """The team as a worker has it (pure): its queue without the dispatch check (the worker
    runs what MultiKueue sends), and every member and group a viewer there. Work reaches a
    worker only through the manager's queue: a member who could create Jobs on each worker of
    a group would spend the grant once per worker, beside the manager's quota."""
    return replace(
        spec,
        dispatch_check="",
        members=tuple(replace(m, role="viewer") for m in spec.members),
        provider_groups=tuple((group, "viewer") for group, _ in spec.provider_groups),
    )


def _record(worker: Cluster, trigger: str, began, outcome: Outcome | None, error) -> None:
    """A worker's run, when it changed something or failed (a no-op writes nothing)."""
    if outcome is not None and not (outcome.changes or outcome.drift):
        return
    ReconcileRun.objects.create(
        tenant=None,
        trigger=f"{trigger}: worker {worker.name}"[:40],
        started_at=began,
        finished_at=timezone.now(),
        status=ReconcileRun.Status.FAILED if error else ReconcileRun.Status.SUCCEEDED,
        changes=outcome.changes if outcome else [],
        drift=outcome.drift if outcome else [],
        error=str(error or "")[:4000],
    )


def reconcile_fleet(
    home: KubeGateway, *, tenant_ids: set[int] | None = None, trigger: str = "periodic"
) -> dict[str, str]:
    """The manager's MultiKueue objects, then each active worker in the platform's order.
    Returns worker name -> its problem (empty: every worker converged). A worker's failure is
    recorded and does not stop the others; the manager's is raised (its queues name it)."""
    if not has_fleet():
        return {}
    plan = dispatch.fleet_plan()
    reconcile_manager(home, plan)
    problems = {}
    for worker in sorted(plan.workers.values(), key=lambda w: (w.preference, w.name)):
        began, t0 = timezone.now(), time.monotonic()
        try:
            outcome = reconcile_worker(worker, plan, tenant_ids)
        except ClusterError as exc:
            problems[worker.name] = str(exc)
            log.warning("reconcile of worker %s failed: %s", worker.name, exc)
            _record(worker, trigger, began, None, exc)
            continue
        _record(worker, trigger, began, outcome, None)
        log.info("worker %s converged in %.1f s", worker.name, time.monotonic() - t0)
    return problems
