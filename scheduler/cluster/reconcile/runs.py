"""The runs a task calls: reconcile one tenant, the cluster-wide objects, or every tenant at once
(level-triggered: the cluster is made to match what PostgreSQL says each tenant is granted).
A tenant's runs never overlap (an advisory lock across workers); each run is recorded.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import ClusterError, PermanentClusterError, TransientClusterError
from core.images import allowlist_spellings
from core.locks import advisory_lock
from scheduler.cluster.kube import CallStats, KubeGateway
from scheduler.cluster.models import ReconcileRun, TenantSyncState
from scheduler.cluster.reconcile.cohorts import reconcile_cohorts
from scheduler.cluster.reconcile.converge import (
    MANAGED,
    Outcome,
    _terminating,
    converge,
    execute,
    is_foreign_binding,
    is_managed,
    key_str,
    managed_selector,
    plan_converge,
)
from scheduler.cluster.reconcile.specs import (
    build_specs,
    flavor_specs,
    priority_class_specs,
    tenant_namespace,
)
from scheduler.cluster.render.kueue import render_flavors
from scheduler.cluster.render.labels import (
    HASH_ANNOTATION,
    NAMESPACED_KINDS,
    TENANT_CLUSTER_KINDS,
    TENANT_LABEL,
    object_key,
)
from scheduler.cluster.render.ownership_guard import render_ownership_guard
from scheduler.cluster.render.priorities import (
    render_priority_classes,
    render_workload_priority_classes,
)
from scheduler.cluster.render.queue_guard import render_queue_guard
from scheduler.cluster.render.specs import TenantSpec
from scheduler.cluster.render.tenant import render_tenant
from tenants.models import CapacityRequest, QuotaGrant, Tenant
from tenants.services.requests import mark_request_provisioned

log = logging.getLogger(__name__)

LOCK_NAMESPACE = 0x6770  # "gp": advisory-lock key space of the reconciler


class TenantBusy(TransientClusterError):
    """Another run holds the tenant's lock; retry later."""


@contextmanager
def tenant_lock(tenant_id: int):
    """A session-level advisory lock: a tenant's runs never overlap, across workers."""
    with advisory_lock(LOCK_NAMESPACE, tenant_id) as acquired:
        if not acquired:
            raise TenantBusy(f"tenant {tenant_id} is being reconciled by another run")
        yield


@dataclass(frozen=True)
class _Begun:
    """A run as it began: why and when."""

    trigger: str
    at: datetime

    @classmethod
    def now(cls, trigger: str) -> _Begun:
        return cls(trigger, timezone.now())


def _record(
    tenant: Tenant | None,
    begun: _Begun,
    outcome: Outcome | None,
    error: Exception | None,
    cost: CallStats,
    *,
    always: bool,
) -> ReconcileRun | None:
    now = timezone.now()
    changes = outcome.changes if outcome else []
    drift = outcome.drift if outcome else []
    with transaction.atomic():
        if tenant is not None:
            state, _ = TenantSyncState.objects.select_for_update().get_or_create(tenant=tenant)
            failure = None if error is None else (str(error) or type(error).__name__)
            state.record_run(started=begun.at, finished=now, error=failure)
            if error is None:
                state.applied_hashes = outcome.applied if outcome else {}
            state.save()
        if not (always or changes or drift or error):
            return None
        return ReconcileRun.objects.create(
            tenant=tenant,
            trigger=begun.trigger,
            started_at=begun.at,
            finished_at=now,
            status=ReconcileRun.Status.FAILED if error else ReconcileRun.Status.SUCCEEDED,
            changes=changes,
            drift=drift,
            error=str(error or "")[:4000],
            api_calls=cost.total,
            writes=cost.writes,
        )


def _mark_syncing(tenant: Tenant) -> None:
    TenantSyncState.objects.update_or_create(
        tenant=tenant, defaults={"status": TenantSyncState.Status.SYNCING}
    )


def _provision(tenant: Tenant) -> None:
    """Approved requests whose grants are in force are now on the cluster."""
    now = timezone.now()
    due = CapacityRequest.objects.filter(
        tenant=tenant,
        state=CapacityRequest.State.APPROVED,
        starts_at__lte=now,
        grants__state=QuotaGrant.State.ACTIVE,
    ).distinct()
    for request in due:
        mark_request_provisioned(request=request)


def _tenant_desired(tenant: Tenant, spec: TenantSpec | None) -> list[dict]:
    if tenant.status == Tenant.Status.ARCHIVED or spec is None:
        return []
    return render_tenant(spec)


def _sync_one(
    kube: KubeGateway,
    tenant: Tenant,
    spec: TenantSpec | None,
    live: list[dict],
    previously: dict[str, str],
) -> Outcome:
    ns = tenant_namespace(tenant)
    if tenant.status == Tenant.Status.ARCHIVED:
        out = Outcome()
        if any(o["kind"] == "Namespace" and not _terminating(o) for o in live) and kube.delete(
            "Namespace", ns
        ):
            out.changes.append(f"Namespace/{ns}: deleted (tenant archived)")
        for obj in live:  # cluster-scoped objects of the tenant do not go with its namespace
            if obj["kind"] in TENANT_CLUSTER_KINDS and not _terminating(obj):
                kind, _, name = object_key(obj)
                if kube.delete(kind, name):
                    out.changes.append(f"{kind}/{name}: deleted (tenant archived)")
        return out
    if any(o["kind"] == "Namespace" and _terminating(o) for o in live):
        # Nothing can be created in it until Kubernetes has finished deleting it: try later.
        raise TransientClusterError(f"namespace {ns} is still being deleted; retrying")
    return converge(kube, _tenant_desired(tenant, spec), live, previously)


def _live_for_tenant(kube: KubeGateway, tenant: Tenant) -> list[dict]:
    ns = tenant_namespace(tenant)
    selector = f"{managed_selector()},{TENANT_LABEL}={tenant.slug}"
    live = []
    namespace = kube.get("Namespace", ns)
    if namespace is not None:
        namespace.setdefault("kind", "Namespace")
        live.append(namespace)
        for kind in NAMESPACED_KINDS:
            if kind == "RoleBinding":  # all of them: the foreign ones are pruned too
                live.extend(
                    b
                    for b in kube.list(kind, ns)
                    if is_foreign_binding(b)
                    or (b["metadata"].get("labels") or {}).get(TENANT_LABEL) == tenant.slug
                )
                continue
            live.extend(kube.list(kind, ns, label_selector=selector))
    for kind in TENANT_CLUSTER_KINDS:
        live.extend(kube.list(kind, label_selector=selector))
    return live


def reconcile_tenant(kube: KubeGateway, tenant_id: int, *, trigger: str = "tenant change"):
    """Reconcile one tenant; returns its ReconcileRun. Raises TransientClusterError for the
    task layer to retry; permanent errors are recorded and returned, not raised."""
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None:
        return None
    with tenant_lock(tenant.pk), kube.stats.tally() as cost:
        begun = _Begun.now(trigger)
        _mark_syncing(tenant)
        tenant.refresh_from_db()
        state = TenantSyncState.objects.get(tenant=tenant)
        try:
            kube.support.require()  # a cluster below the supported versions: refused, recorded
            ensure_cluster_objects(kube)
            if tenant.department_id:  # its queue names the department's Cohort: make it first
                reconcile_cohorts(kube)
            frameworks = kube.kueue_settings.verdict().usable  # read with the cluster objects
            spec = build_specs([tenant], frameworks=frameworks).get(tenant.pk)
            live = _live_for_tenant(kube, tenant)
            outcome = _sync_one(kube, tenant, spec, live, state.applied_hashes)
        except PermanentClusterError as exc:
            log.warning("reconcile of %s failed for good: %s", tenant.slug, exc)
            return _record(tenant, begun, None, exc, cost, always=True)
        except ClusterError as exc:
            _record(tenant, begun, None, exc, cost, always=True)
            raise
        run = _record(tenant, begun, outcome, None, cost, always=True)
        if tenant.status == Tenant.Status.ACTIVE:
            _provision(tenant)
        return run


CLUSTER_KINDS = (
    "PriorityClass",
    "ResourceFlavor",
    "WorkloadPriorityClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def cluster_desired() -> list[dict]:
    return [
        *render_priority_classes(priority_class_specs()),
        *render_flavors(flavor_specs()),
        *render_workload_priority_classes(priority_class_specs()),
        *render_queue_guard(
            tuple(settings.KUEUE_USERNAMES),
            tuple(pc.name for pc in priority_class_specs()),
            allowlist_spellings(settings.WORKLOAD_IMAGE_ALLOWLIST),
            gpu_taint_keys=tuple(
                sorted({t["key"] for t in settings.GPU_NODE_TOLERATIONS if t.get("key")})
            ),
            runtime_classes=tuple(settings.WORKLOAD_RUNTIME_CLASSES),
        ),
        *render_ownership_guard(tuple(settings.KUEUE_USERNAMES)),
    ]


CLUSTER_OBJECTS_TTL = 300.0  # seconds a tenant's run trusts an earlier cluster-wide converge


def ensure_cluster_objects(kube: KubeGateway) -> None:
    """A tenant's ClusterQueue needs the flavors it names: a tenant's own run converges the
    cluster-wide objects first unless this gateway did so recently (the periodic run always
    does)."""
    if time.monotonic() - kube.cluster_objects_at > CLUSTER_OBJECTS_TTL:
        reconcile_cluster_objects(kube)


def reconcile_cluster_objects(kube: KubeGateway) -> Outcome:
    """PriorityClasses, ResourceFlavors, WorkloadPriorityClasses and the queue guard: shared by
    every instance of the portal on the cluster (same names and content), so listed by the
    managed label alone. A flavor is never pruned: another instance's queues may name a GPU
    model this one has no class of (and Kueue holds a flavor in use anyway). Kueue's running
    settings are read again with them (kueue_settings.py): said, never refused."""
    kube.kueue_settings.verdict(fresh=True)
    desired = cluster_desired()
    live = [obj for kind in CLUSTER_KINDS for obj in kube.list(kind, label_selector=MANAGED)]
    previously = {key_str(m): m["metadata"]["annotations"][HASH_ANNOTATION] for m in desired}
    plan = plan_converge(desired, live, previously)
    plan.to_delete = [obj for obj in plan.to_delete if obj["kind"] != "ResourceFlavor"]
    outcome = execute(kube, plan)
    kube.cluster_objects_at = time.monotonic()
    return outcome


@dataclass
class Summary:
    tenants: int = 0
    changed: int = 0
    drifted: int = 0
    failed: list[str] = field(default_factory=list)
    skipped_busy: int = 0
    orphans_deleted: int = 0


@dataclass
class _Due:
    """A tenant a periodic run found out of sync, with what it read for it."""

    tenant: Tenant
    spec: TenantSpec | None
    live: list[dict]
    state: TenantSyncState | None

    def sync(self, kube: KubeGateway) -> tuple[Outcome | None, Exception | None, CallStats]:
        """On a pool thread: the API calls alone (PostgreSQL stays on the run's own thread,
        whose connection holds the tenant's lock). Any error is returned, not raised, so that
        no thread of a batch is still applying once the batch's locks are let go."""
        with kube.stats.tally() as cost:
            previously = self.state.applied_hashes if self.state else {}
            try:
                return _sync_one(kube, self.tenant, self.spec, self.live, previously), None, cost
            except Exception as exc:
                return None, exc, cost


def _sync_batch(
    kube: KubeGateway, pool: ThreadPoolExecutor, batch: list[_Due], trigger: str, summary: Summary
) -> None:
    """Converge a batch of tenants at once, each tenant's objects in order on one thread (its
    namespace before what goes in it), then record each run: one apply waiting on another's
    round trip leaves the cores idle (1,000 tenants cold on the 2-core local cluster: 135 s
    one at a time, 93-107 s four at a time). A permanent error is recorded and the run goes
    on; any other is recorded and raised once the batch is: the task retries the whole run."""
    with ExitStack() as held:
        locked = []
        for due in batch:
            try:
                held.enter_context(tenant_lock(due.tenant.pk))
            except TenantBusy:
                summary.skipped_busy += 1
                continue
            locked.append((due, _Begun.now(trigger)))
        raised = None
        results = pool.map(lambda pair: pair[0].sync(kube), locked)
        for (due, begun), (outcome, error, cost) in zip(locked, results, strict=True):
            tenant, state = due.tenant, due.state
            if error is not None:
                _record(tenant, begun, None, error, cost, always=True)
                if isinstance(error, PermanentClusterError):
                    summary.failed.append(f"{tenant.slug}: {error}")
                else:
                    raised = raised or error
                continue
            assert outcome is not None
            needs_record = (
                state is None
                or state.status != TenantSyncState.Status.IN_SYNC
                or state.applied_hashes != outcome.applied
            )
            if outcome.changes or outcome.drift or needs_record:
                _record(tenant, begun, outcome, None, cost, always=False)
            summary.changed += bool(outcome.changes)
            summary.drifted += bool(outcome.drift)
            if outcome.changes and tenant.status == Tenant.Status.ACTIVE:
                _provision(tenant)
    if raised is not None:
        raise raised


def _unchanged(tenant: Tenant, spec, live: list[dict], state: TenantSyncState | None) -> bool:
    """The common case of a periodic run: the tenant is in sync and the cluster matches."""
    if state is None or state.status != TenantSyncState.Status.IN_SYNC:
        return False
    if tenant.status == Tenant.Status.ARCHIVED:
        return False
    plan = plan_converge(_tenant_desired(tenant, spec), live, state.applied_hashes)
    return plan.is_noop and plan.outcome.applied == state.applied_hashes


def reconcile_all(kube: KubeGateway, *, trigger: str = "periodic") -> Summary:
    """Every tenant and the cluster-wide objects, from one listing of each managed kind.
    A tenant whose own run is in progress is skipped (that run converges it)."""
    summary = Summary()
    kube.support.require()  # below the supported versions: nothing is read or written
    reconcile_cluster_objects(kube)
    reconcile_cohorts(kube)  # departments' Cohorts before the queues that name them
    live_by_tenant: dict[str, list[dict]] = defaultdict(list)
    tenants = list(Tenant.objects.all())
    slug_of_namespace = {tenant_namespace(t): t.slug for t in tenants}
    for kind in ("Namespace", *NAMESPACED_KINDS, *TENANT_CLUSTER_KINDS):
        # RoleBindings: every one, so that access granted outside the portal is pruned too.
        selector = "" if kind == "RoleBinding" else managed_selector()
        for obj in kube.list(kind, label_selector=selector):
            if not is_managed(obj):
                slug = slug_of_namespace.get(obj["metadata"].get("namespace", ""))
                if slug and is_foreign_binding(obj):
                    live_by_tenant[slug].append(obj)
                continue
            slug = (obj["metadata"].get("labels") or {}).get(TENANT_LABEL)
            if slug:
                live_by_tenant[slug].append(obj)
    specs = build_specs(
        [t for t in tenants if t.status != Tenant.Status.ARCHIVED],
        frameworks=kube.kueue_settings.verdict().usable,
    )
    states = {s.tenant_id: s for s in TenantSyncState.objects.all()}
    due = []
    for tenant in tenants:
        live = live_by_tenant.pop(tenant.slug, [])
        if tenant.status == Tenant.Status.ARCHIVED and not live:
            continue
        summary.tenants += 1
        state = states.get(tenant.pk)
        if _unchanged(tenant, specs.get(tenant.pk), live, state):
            continue  # nothing to write and nothing to record: no lock, no query
        due.append(_Due(tenant, specs.get(tenant.pk), live, state))
    threads = max(1, settings.RECONCILE_APPLY_THREADS)
    with ThreadPoolExecutor(threads, thread_name_prefix="reconcile") as pool:
        size = 4 * threads  # locks held and runs recorded a batch at a time
        for start in range(0, len(due), size):
            _sync_batch(kube, pool, due[start : start + size], trigger, summary)
    # Objects labelled for tenants the database does not know at all: left over, remove them.
    for slug, objects in live_by_tenant.items():
        for obj in objects:
            if obj["kind"] in ("Namespace", *TENANT_CLUSTER_KINDS) and not _terminating(obj):
                kind, _, name = object_key(obj)
                if kube.delete(kind, name):
                    summary.orphans_deleted += 1
                    log.info("deleted orphan namespace %s of unknown tenant %s", name, slug)
    return summary
