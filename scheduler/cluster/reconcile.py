"""Make the cluster match what PostgreSQL says each tenant is granted (level-triggered).

Desired state is rendered by `scheduler.cluster.render`; this module compares it with what the API
server has, applies only what differs (a no-op run writes nothing), prunes what the portal
labelled and no longer wants, tells drift from change, and records each run.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.errors import ClusterError, PermanentClusterError, TransientClusterError
from core.images import allowlist_spellings
from scheduler.catalog.models import Pool, ResourceClass
from scheduler.catalog.product_labels import product_label
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import ReconcileRun, TenantSyncState
from scheduler.cluster.render.kueue import render_flavors
from scheduler.cluster.render.labels import (
    HASH_ANNOTATION,
    INSTANCE_LABEL,
    KEEP_BINDING_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAMESPACED_KINDS,
    TENANT_CLUSTER_KINDS,
    TENANT_LABEL,
    object_key,
)
from scheduler.cluster.render.priorities import (
    render_priority_classes,
    render_workload_priority_classes,
)
from scheduler.cluster.render.queue_guard import render_queue_guard
from scheduler.cluster.render.specs import (
    FlavorSpec,
    Member,
    PriorityClassSpec,
    QueueLine,
    TenantSpec,
)
from scheduler.cluster.render.tenant import render_tenant
from tenants import group_mapping
from tenants.models import (
    CRITICAL_PRIORITY_CLASS,
    PRIORITY_CLASS_DEFS,
    CapacityRequest,
    Membership,
    QuotaGrant,
    Tenant,
)
from tenants.selectors import effective_quotas
from tenants.services import mark_request_provisioned

log = logging.getLogger(__name__)

MANAGED = f"{MANAGED_BY_LABEL}={MANAGED_BY}"


def managed_selector() -> str:
    """What this portal instance owns (several may share one cluster)."""
    return f"{MANAGED},{INSTANCE_LABEL}={settings.PORTAL_INSTANCE}"


LOCK_NAMESPACE = 0x6770  # "gp": advisory-lock key space of the reconciler


class TenantBusy(TransientClusterError):
    """Another run holds the tenant's lock; retry later."""


# --- desired state from the database ---------------------------------------------------------


def priority_class_specs() -> list[PriorityClassSpec]:
    return [
        PriorityClassSpec(name=pc.name, value=pc.value, description=pc.description)
        for pc in PRIORITY_CLASS_DEFS
    ]


def flavor_name(gpu_model: str) -> str:
    """The Kueue ResourceFlavor of a GPU model (catalog key A100-80GB -> a100-80gb)."""
    return gpu_model.lower()


def flavor_specs(classes: Iterable[ResourceClass] | None = None) -> list[FlavorSpec]:
    """One flavor per GPU model that has an active class; the product label GFD sets comes from
    `GPU_PRODUCT_LABELS` or the catalog (a model neither knows gets GFD's usual
    `NVIDIA-<model>`), and the tolerations from `GPU_NODE_TOLERATIONS`."""
    if classes is None:
        classes = ResourceClass.objects.filter(active=True)
    models = sorted({rc.gpu_model for rc in classes if rc.active})
    tolerations = tuple(settings.GPU_NODE_TOLERATIONS)
    return [
        FlavorSpec(
            name=flavor_name(model),
            product_label=product_label(model),
            tolerations=tolerations,
        )
        for model in models
    ]


def queue_lines(
    classes: dict[int, ResourceClass], pools: dict[int, Pool], granted: dict[int, int]
) -> tuple[QueueLine, ...]:
    """Every (flavor, resource) a tenant's ClusterQueue lists: nominal = its grants, borrowing
    and lending from the pool's policy; the other resource names of a flavor are left to
    render (zero: Kueue wants each flavor to list every resource of its group)."""
    lines: dict[tuple[str, str], QueueLine] = {}
    for rc in classes.values():
        if not rc.active:
            continue
        pool = pools.get(rc.pk)
        key = (flavor_name(rc.gpu_model), rc.resource_name)
        previous = lines.get(key)
        lines[key] = QueueLine(
            flavor=key[0],
            resource_name=key[1],
            nominal=granted.get(rc.pk, 0) + (previous.nominal if previous else 0),
            borrowing_limit=max(
                pool.borrowing_limit if pool else 0, previous.borrowing_limit if previous else 0
            ),
            lend=(pool.lend_idle if pool else True) and (previous.lend if previous else True),
        )
    return tuple(lines[k] for k in sorted(lines))


def provider_groups_by_tenant() -> dict[str, list[tuple[str, str]]]:
    """tenant slug -> [(group, role)]: the identity provider's groups that OIDC_GROUP_MAP names,
    bound in the cluster as its members are (a pattern names no group in advance: those people
    are bound by name once they have signed in). Empty while group mapping is off or its
    settings are malformed: then sign-in changes nothing either."""
    mapping = group_mapping.mapping_in_force()
    if mapping is None:
        return {}
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for group, targets in mapping.by_group.items():
        for tenant, role in targets:
            out[tenant].append((group, role))
    return out


def build_specs(tenants: list[Tenant]) -> dict[int, TenantSpec]:
    """TenantSpecs for many tenants in a fixed number of queries."""
    ids = [t.pk for t in tenants]
    groups = provider_groups_by_tenant()
    classes = {rc.pk: rc for rc in ResourceClass.objects.all()}
    pools = {p.resource_class_id: p for p in Pool.objects.all()}
    resource_names = tuple(sorted({rc.resource_name for rc in classes.values() if rc.active}))
    quotas = effective_quotas(ids)
    held = queue_holds(ids)
    members: dict[int, list[Member]] = defaultdict(list)
    robots = {t.robot_id for t in tenants if t.robot_id}
    for m in Membership.objects.filter(tenant_id__in=ids).select_related("user"):
        members[m.tenant_id].append(
            Member(m.user.get_username(), m.role, is_robot=m.user_id in robots)
        )
    priority_names = tuple(pc.name for pc in priority_class_specs())
    specs = {}
    for t in tenants:
        lines = queue_lines(classes, pools, quotas.get(t.pk, {}))
        # The ResourceQuota is a backstop under Kueue: per resource name it allows what the
        # queue may admit at most (grants plus what may be borrowed), on any model.
        by_name: dict[str, int] = defaultdict(int)
        for line in lines:
            if line.nominal or line.borrowing_limit:
                by_name[line.resource_name] += line.nominal + line.borrowing_limit
        specs[t.pk] = TenantSpec(
            slug=t.slug,
            name=t.name,
            active=t.status == Tenant.Status.ACTIVE,
            gpu_quota=dict(by_name),
            gpu_resource_names=resource_names,
            members=tuple(members[t.pk]),
            allowed_priority_classes=tuple(t.allowed_priority_classes or ()),
            all_priority_classes=priority_names,
            critical_priority_class=CRITICAL_PRIORITY_CLASS,
            critical_units=t.critical_gpu_quota,
            platform_namespace=settings.PLATFORM_NAMESPACE,
            platform_web_pod_labels=tuple(sorted(settings.PLATFORM_WEB_POD_LABELS.items())),
            platform_web_port=settings.PLATFORM_WEB_PORT,
            namespace_prefix=settings.TENANT_NAMESPACE_PREFIX,
            cpu_quota=settings.TENANT_CPU_QUOTA,
            memory_quota=settings.TENANT_MEMORY_QUOTA,
            ephemeral_storage_quota=settings.TENANT_EPHEMERAL_STORAGE_QUOTA,
            pod_quota=settings.TENANT_POD_QUOTA,
            pvc_quota=settings.TENANT_PVC_QUOTA,
            storage_quota=settings.TENANT_STORAGE_QUOTA,
            container_max={
                "cpu": settings.WORKLOAD_MAX_CPU,
                "memory": settings.WORKLOAD_MAX_MEMORY,
                "ephemeral-storage": settings.WORKLOAD_MAX_EPHEMERAL_STORAGE,
            },
            user_prefix=settings.KUBE_USER_PREFIX,
            provider_groups=tuple(sorted(groups.get(t.slug, ()))),
            group_prefix=settings.KUBE_GROUP_PREFIX,
            pod_exec=settings.TENANT_POD_EXEC,
            egress_allowed_cidrs=tuple(settings.TENANT_EGRESS_ALLOWED_CIDRS),
            egress_denied_cidrs=tuple(settings.TENANT_EGRESS_DENIED_CIDRS),
            dns_namespace=settings.CLUSTER_DNS_NAMESPACE,
            dns_pod_labels=tuple(sorted(settings.CLUSTER_DNS_POD_LABELS.items())),
            instance=settings.PORTAL_INSTANCE,
            queue_lines=lines,
            cohort=cohort_name(),
            queue_held=t.pk in held,
        )
    return specs


def cohort_name() -> str:
    """One cohort per portal instance: its teams lend to and borrow from each other only."""
    return f"gpu-portal-{settings.PORTAL_INSTANCE}"


# Other apps (metering's budget) register `tenant ids -> ids whose new work must wait`; the
# LocalQueue of those tenants is held, so work submitted with kubectl waits too.
_queue_hold_checks: list = []


def register_queue_hold(check) -> None:
    if check not in _queue_hold_checks:
        _queue_hold_checks.append(check)


def queue_holds(tenant_ids: list[int]) -> set[int]:
    held: set[int] = set()
    for check in _queue_hold_checks:
        held |= set(check(tenant_ids))
    return held


def tenant_namespace(tenant: Tenant) -> str:
    return tenant.namespace


# --- comparing -------------------------------------------------------------------------------


def key_str(manifest: dict) -> str:
    kind, ns, name = object_key(manifest)
    return f"{kind}/{ns}/{name}" if ns else f"{kind}/{name}"


def matches(desired: dict, live: dict) -> bool:
    """Live has our labels and annotations and exactly our content (the API server's own
    additions such as status or extra metadata are ignored)."""
    d_meta, l_meta = desired["metadata"], live.get("metadata", {})
    for part in ("labels", "annotations"):
        live_part = l_meta.get(part) or {}
        if any(live_part.get(k) != v for k, v in (d_meta.get(part) or {}).items()):
            return False
    same = _contained if desired.get("apiVersion", "").startswith(DEFAULTED_GROUPS) else _equal
    return all(
        same(v, live.get(k))
        for k, v in desired.items()
        if k not in ("metadata", "kind", "apiVersion")
    )


# API groups whose objects the API server (or Kueue's webhooks) fill with defaults.
DEFAULTED_GROUPS = ("kueue.x-k8s.io/", "admissionregistration.k8s.io/")


def _equal(desired, live) -> bool:
    return desired == live


def _contained(desired, live) -> bool:
    """Desired is live less what the API server defaulted: Kueue's CRDs and webhooks fill in
    fields we leave out (flavorFungibility, preemption defaults…), admission policies get a
    matchPolicy and empty selectors; none of that is drift."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            _contained(v, live.get(k)) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(_contained(d, v) for d, v in zip(desired, live, strict=True))
        )
    return desired == live


@dataclass
class Outcome:
    changes: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    applied: dict[str, str] = field(default_factory=dict)


@dataclass
class ConvergePlan:
    """What a converge would do, computed without calling the API server (pure)."""

    to_apply: list[dict] = field(default_factory=list)
    to_delete: list[dict] = field(default_factory=list)
    outcome: Outcome = field(default_factory=Outcome)

    @property
    def is_noop(self) -> bool:
        return not (self.to_apply or self.to_delete)


def plan_converge(
    desired: list[dict],
    live: Iterable[dict],
    previously_applied: dict[str, str],
    *,
    prune: bool = True,
) -> ConvergePlan:
    plan = ConvergePlan()
    out = plan.outcome
    live_by_key = {key_str(obj): obj for obj in live}
    for manifest in desired:
        key = key_str(manifest)
        want_hash = manifest["metadata"]["annotations"][HASH_ANNOTATION]
        current = live_by_key.pop(key, None)
        out.applied[key] = want_hash
        if current is not None and matches(manifest, current):
            continue
        if current is None:
            if previously_applied.get(key) == want_hash:
                out.drift.append(f"{key}: deleted outside the portal")
            out.changes.append(f"{key}: created")
        else:
            live_hash = (current["metadata"].get("annotations") or {}).get(HASH_ANNOTATION)
            if live_hash == want_hash:
                out.drift.append(f"{key}: edited outside the portal")
            out.changes.append(f"{key}: updated")
        plan.to_apply.append(manifest)
    if prune:
        plan.to_delete = [obj for obj in live_by_key.values() if not _terminating(obj)]
        for obj in plan.to_delete:
            if not is_managed(obj):
                out.drift.append(f"{key_str(obj)}: access granted outside the portal")
    return plan


def is_managed(obj: dict) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return (
        labels.get(MANAGED_BY_LABEL) == MANAGED_BY
        and labels.get(INSTANCE_LABEL) == settings.PORTAL_INSTANCE
    )


def is_foreign_binding(obj: dict) -> bool:
    """A RoleBinding in a tenant namespace that the portal did not render: pruned (access is
    granted through the portal), unless the platform team labelled it to keep."""
    labels = obj["metadata"].get("labels") or {}
    return not is_managed(obj) and labels.get(KEEP_BINDING_LABEL) != "true"


def execute(kube: KubeGateway, plan: ConvergePlan) -> Outcome:
    for manifest in plan.to_apply:
        kube.apply(manifest)
    for obj in plan.to_delete:
        kind, ns, name = object_key(obj)
        if kube.delete(kind, name, ns or None):
            plan.outcome.changes.append(f"{key_str(obj)}: deleted")
    return plan.outcome


def converge(
    kube: KubeGateway,
    desired: list[dict],
    live: Iterable[dict],
    previously_applied: dict[str, str],
    *,
    prune: bool = True,
) -> Outcome:
    """Apply what differs, delete what we own and no longer want, and classify drift."""
    return execute(kube, plan_converge(desired, live, previously_applied, prune=prune))


# --- runs, locks and recording ----------------------------------------------------------------


@contextmanager
def tenant_lock(tenant_id: int):
    """A session-level advisory lock: a tenant's runs never overlap, across workers."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_NAMESPACE, tenant_id])
        (acquired,) = cursor.fetchone()
    if not acquired:
        raise TenantBusy(f"tenant {tenant_id} is being reconciled by another run")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_NAMESPACE, tenant_id])


def _record(
    tenant: Tenant | None,
    trigger: str,
    started,
    outcome: Outcome | None,
    error: Exception | None,
    calls_before: int,
    writes_before: int,
    kube: KubeGateway,
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
            state.record_run(started=started, finished=now, error=failure)
            if error is None:
                state.applied_hashes = outcome.applied if outcome else {}
            state.save()
        if not (always or changes or drift or error):
            return None
        return ReconcileRun.objects.create(
            tenant=tenant,
            trigger=trigger,
            started_at=started,
            finished_at=now,
            status=ReconcileRun.Status.FAILED if error else ReconcileRun.Status.SUCCEEDED,
            changes=changes,
            drift=drift,
            error=str(error or "")[:4000],
            api_calls=kube.stats.total - calls_before,
            writes=kube.stats.writes - writes_before,
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


def _terminating(obj: dict) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


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
    with tenant_lock(tenant.pk):
        started = timezone.now()
        calls, writes = kube.stats.total, kube.stats.writes
        _mark_syncing(tenant)
        tenant.refresh_from_db()
        state = TenantSyncState.objects.get(tenant=tenant)
        try:
            ensure_cluster_objects(kube)
            spec = build_specs([tenant]).get(tenant.pk)
            live = _live_for_tenant(kube, tenant)
            outcome = _sync_one(kube, tenant, spec, live, state.applied_hashes)
        except PermanentClusterError as exc:
            log.warning("reconcile of %s failed for good: %s", tenant.slug, exc)
            return _record(tenant, trigger, started, None, exc, calls, writes, kube, always=True)
        except ClusterError as exc:
            _record(tenant, trigger, started, None, exc, calls, writes, kube, always=True)
            raise
        run = _record(tenant, trigger, started, outcome, None, calls, writes, kube, always=True)
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
        ),
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
    model this one has no class of (and Kueue holds a flavor in use anyway)."""
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
    reconcile_cluster_objects(kube)
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
    specs = build_specs([t for t in tenants if t.status != Tenant.Status.ARCHIVED])
    states = {s.tenant_id: s for s in TenantSyncState.objects.all()}
    for tenant in tenants:
        live = live_by_tenant.pop(tenant.slug, [])
        if tenant.status == Tenant.Status.ARCHIVED and not live:
            continue
        summary.tenants += 1
        state = states.get(tenant.pk)
        if _unchanged(tenant, specs.get(tenant.pk), live, state):
            continue  # nothing to write and nothing to record: no lock, no query
        try:
            with tenant_lock(tenant.pk):
                started = timezone.now()
                calls, writes = kube.stats.total, kube.stats.writes
                try:
                    outcome = _sync_one(
                        kube,
                        tenant,
                        specs.get(tenant.pk),
                        live,
                        state.applied_hashes if state else {},
                    )
                except PermanentClusterError as exc:
                    summary.failed.append(f"{tenant.slug}: {exc}")
                    _record(tenant, trigger, started, None, exc, calls, writes, kube, always=True)
                    continue
                except TransientClusterError as exc:
                    _record(tenant, trigger, started, None, exc, calls, writes, kube, always=True)
                    raise
                needs_record = (
                    state is None
                    or state.status != TenantSyncState.Status.IN_SYNC
                    or state.applied_hashes != outcome.applied
                )
                if outcome.changes or outcome.drift or needs_record:
                    _record(
                        tenant, trigger, started, outcome, None, calls, writes, kube, always=False
                    )
                summary.changed += bool(outcome.changes)
                summary.drifted += bool(outcome.drift)
                if outcome.changes and tenant.status == Tenant.Status.ACTIVE:
                    _provision(tenant)
        except TenantBusy:
            summary.skipped_busy += 1
    # Objects labelled for tenants the database does not know at all: left over, remove them.
    for slug, objects in live_by_tenant.items():
        for obj in objects:
            if obj["kind"] in ("Namespace", *TENANT_CLUSTER_KINDS) and not _terminating(obj):
                kind, _, name = object_key(obj)
                if kube.delete(kind, name):
                    summary.orphans_deleted += 1
                    log.info("deleted orphan namespace %s of unknown tenant %s", name, slug)
    return summary
