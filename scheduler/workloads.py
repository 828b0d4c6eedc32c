"""Workloads: admission in the portal, pure manifests, and following what the cluster does.

- `submit_workload` checks everything the cluster cannot see (the per-model split of a tenant's
  grants, the image allow-list, priority classes) under a lock of the tenant row, writes the
  workload and its audit event, and on commit queues its creation in a worker.
- The pure manifests (`render_job`, `render_deployment`, `render_hpa`) and `observe` live in
  `scheduler.workload_manifests` and are re-exported here; the checks of the submitted fields
  that need no database (image, env, labels, autoscaling) are in `scheduler.workload_input`.
- `create_in_cluster`, `sync_workload` and `cancel_workload` are the cluster side, called by tasks
  through `scheduler.kube` (the one door to the API server).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from scheduler.errors import ClusterError, PermanentClusterError
from scheduler.kube import KubeGateway
from scheduler.models import ResourceClass, Workload, WorkloadEvent
from scheduler.workload_input import (
    MAX_BACKOFF_LIMIT,
    MAX_REPLICAS,
    check_autoscaling,
    check_env,
    check_image,
    check_labels,
    check_strings,
)
from scheduler.workload_manifests import (
    CONTAINER_NAME,
    GPU_MODEL_LABEL,
    PREEMPTION_REASONS,
    WORKLOAD_LABEL,
    AutoscalingSpec,
    Observation,
    WorkloadSpec,
    observe,
    preemption_of,
    render_deployment,
    render_hpa,
    render_job,
    render_pod_template,
    render_workload,
)
from tenants import audit
from tenants.exceptions import InvalidInput, InvalidTransition, QuotaExceeded, ServiceError
from tenants.models import PRIORITY_CLASSES, Tenant, dns_label
from tenants.permissions import READ_ROLES, WRITE_ROLES, require_role
from tenants.selectors import effective_quotas

log = logging.getLogger(__name__)

# Re-exported: callers and tests import the pure functions from here as well.
__all__ = [
    "CONTAINER_NAME",
    "GPU_MODEL_LABEL",
    "PREEMPTION_REASONS",
    "WORKLOAD_LABEL",
    "AutoscalingSpec",
    "Observation",
    "WorkloadSpec",
    "observe",
    "preemption_of",
    "render_deployment",
    "render_hpa",
    "render_job",
    "render_pod_template",
    "render_workload",
]

WORKLOAD_FIELDS = ["state", "reason"]


class LogsUnavailable(ServiceError):
    code = "logs_unavailable"
    status = 409


# --- admission (portal side) -----------------------------------------------------------------


@dataclass
class QuotaLine:
    resource_class: ResourceClass
    granted: int
    in_use: int

    @property
    def free(self) -> int:
        return max(0, self.granted - self.in_use)


def usage_by_tenant(tenant_ids: list[int]) -> dict[int, dict[str, int]]:
    """tenant id -> {resource class slug -> units its workloads hold} (one query)."""
    out: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    rows = Workload.objects.holding().filter(tenant_id__in=tenant_ids)
    for w in rows.only("tenant_id", "kind", "replicas", "max_replicas", "resources"):
        for slug, units in w.units_held().items():
            out[w.tenant_id][slug] += units
    return out


def quota_lines(tenant: Tenant) -> list[QuotaLine]:
    """Granted, in use and free per resource class the tenant holds or uses."""
    granted = effective_quotas([tenant.pk]).get(tenant.pk, {})
    used = usage_by_tenant([tenant.pk]).get(tenant.pk, {})
    classes = ResourceClass.objects.filter(pk__in=list(granted)) | ResourceClass.objects.filter(
        slug__in=list(used)
    )
    return [
        QuotaLine(rc, granted.get(rc.pk, 0), used.get(rc.slug, 0))
        for rc in classes.order_by("slug")
    ]


def _resolve_resources(resources: Any) -> list[tuple[ResourceClass, int]]:
    if not isinstance(resources, dict) or not resources:
        raise InvalidInput(
            "ask for at least one resource class, e.g. {'a100-80gb-mig-3g.40gb': 1}",
            field="resources",
        )
    known = {rc.slug: rc for rc in ResourceClass.objects.filter(slug__in=list(resources))}
    out = []
    for slug, units in resources.items():
        rc = known.get(slug)
        if rc is None or not rc.active:
            raise InvalidInput(
                f"unknown resource class {slug!r}; see /api/v1/resource-classes/",
                field="resources",
            )
        if isinstance(units, bool) or not isinstance(units, int) or units < 1:
            raise InvalidInput(f"{slug}: units must be a whole number ≥ 1", field="resources")
        out.append((rc, units))
    models = {rc.gpu_model for rc, _ in out}
    if len(models) > 1:
        raise InvalidInput(
            f"one workload runs on one GPU model; this asks for {sorted(models)}",
            field="resources",
        )
    names = [rc.resource_name for rc, _ in out]
    if len(set(names)) != len(names):
        raise InvalidInput("two classes here share one Kubernetes resource", field="resources")
    return out


def _check_fits(
    tenant: Tenant,
    asked: list[tuple[ResourceClass, int]],
    pods: int,
    priority: str,
    *,
    autoscaled: bool = False,
) -> None:
    granted = effective_quotas([tenant.pk]).get(tenant.pk, {})
    used = usage_by_tenant([tenant.pk]).get(tenant.pk, {})
    short = []
    for rc, units in asked:
        need = units * pods
        free = max(0, granted.get(rc.pk, 0) - used.get(rc.slug, 0))
        if need > free:
            short.append((rc.slug, need, free, granted.get(rc.pk, 0)))
    if short:
        parts = [
            f"{slug}: needs {need}, free {free} of {total} granted; ask for {need - free} more"
            for slug, need, free, total in short
        ]
        at = f" ({pods} pods at max replicas)" if autoscaled else ""
        raise QuotaExceeded(
            f"{tenant.slug} cannot run this now{at}: " + "; ".join(parts),
            field="autoscaling" if autoscaled else "resources",
        )
    if priority == "gpu-critical":
        held = sum(
            sum(w.units_held().values())
            for w in Workload.objects.holding().filter(tenant=tenant, priority_class=priority)
        )
        need = sum(units * pods for _, units in asked)
        if held + need > tenant.critical_gpu_quota:
            raise QuotaExceeded(
                f"{tenant.slug} may run {tenant.critical_gpu_quota} units at gpu-critical; "
                f"{held} are in use and this needs {need}",
                field="priority",
            )


def spec_for(workload: Workload) -> WorkloadSpec:
    classes = {
        rc.slug: rc for rc in ResourceClass.objects.filter(slug__in=list(workload.resources))
    }
    return WorkloadSpec(
        name=workload.k8s_name,
        namespace=workload.namespace,
        tenant=workload.tenant.slug,
        workload_id=workload.pk,
        kind=workload.kind,
        image=workload.image,
        gpu_model=workload.gpu_model,
        priority_class=workload.priority_class,
        gpus={classes[s].resource_name: int(n) for s, n in workload.resources.items()},
        command=tuple(workload.command or ()),
        args=tuple(workload.args or ()),
        env=dict(workload.env or {}),
        labels=dict(workload.labels or {}),
        replicas=workload.replicas,
        backoff_limit=workload.backoff_limit,
        instance=settings.PORTAL_INSTANCE,
        autoscaling=_autoscaling_spec(workload),
    )


def _autoscaling_spec(workload: Workload) -> AutoscalingSpec | None:
    if workload.max_replicas is None:
        return None
    return AutoscalingSpec(
        min_replicas=workload.replicas,
        max_replicas=workload.max_replicas,
        target_gpu_util=workload.target_gpu_util,
        target_latency_ms=workload.target_latency_ms,
        gpu_util_metric=settings.AUTOSCALING_GPU_UTIL_METRIC,
        latency_metric=settings.AUTOSCALING_LATENCY_METRIC,
    )


def _enqueue_create(workload_id: int) -> None:
    from scheduler import tasks

    try:
        tasks.create_workload.delay(workload_id=workload_id)
    except Exception:  # the periodic sync creates what a lost message left behind
        log.exception("could not queue the creation of workload %s", workload_id)


def submit_workload(
    *,
    actor,
    tenant: Tenant,
    name: str,
    kind: str,
    image: str,
    resources: dict,
    priority: str,
    command: list | None = None,
    args: list | None = None,
    env: dict | None = None,
    labels: dict | None = None,
    replicas: int = 1,
    backoff_limit: int = 0,
    autoscaling: dict | None = None,
) -> Workload:
    """Admit a workload and queue its creation on the cluster (after commit). An autoscaled
    deployment starts at `min_replicas` and is admitted only when `max_replicas` pods fit."""
    from scheduler.reconcile import tenant_namespace

    require_role(actor, tenant, WRITE_ROLES, "submit workloads")
    try:
        dns_label(name or "")
    except ValidationError as exc:
        raise InvalidInput(f"name {name!r}: {exc.messages[0]}", field="name") from None
    if kind not in Workload.Kind.values:
        raise InvalidInput(f"kind must be one of {Workload.Kind.values}", field="kind")
    check_image(image)
    command = check_strings(command, "command")
    args = check_strings(args, "args")
    env = check_env(env)
    labels = check_labels(labels)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise InvalidInput("replicas must be a whole number ≥ 1", field="replicas")
    if kind == Workload.Kind.JOB and replicas != 1:
        raise InvalidInput("a job runs one pod: leave replicas at 1", field="replicas")
    if replicas > MAX_REPLICAS:
        raise InvalidInput(f"at most {MAX_REPLICAS} replicas", field="replicas")
    scaling = check_autoscaling(autoscaling, kind, replicas)
    if scaling is not None:
        replicas = scaling["min_replicas"]
    if not isinstance(backoff_limit, int) or not 0 <= backoff_limit <= MAX_BACKOFF_LIMIT:
        raise InvalidInput(f"backoff_limit must be 0–{MAX_BACKOFF_LIMIT}", field="backoff_limit")
    if priority not in PRIORITY_CLASSES:
        raise InvalidInput(f"priority must be one of {list(PRIORITY_CLASSES)}", field="priority")
    asked = _resolve_resources(resources)
    with transaction.atomic():
        # The tenant row serialises admissions of one tenant: two submits cannot both take
        # the last free unit.
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        if not tenant.is_active:
            raise InvalidTransition(f"{tenant.slug} is {tenant.status}: nothing can run")
        from metering.services import check_budget  # BUDGET_ENFORCE: refuse over budget

        check_budget(tenant)
        if priority not in (tenant.allowed_priority_classes or []):
            raise InvalidInput(
                f"{tenant.slug} may use the priority classes "
                f"{sorted(tenant.allowed_priority_classes or [])}, not {priority}",
                field="priority",
                code="priority_not_allowed",
            )
        if Workload.objects.live().filter(tenant=tenant, name=name).exists():
            raise InvalidInput(
                f"{tenant.slug} already runs a workload named {name!r}", field="name"
            )
        pods = replicas if kind == Workload.Kind.DEPLOYMENT else 1
        if scaling is not None:
            pods = scaling["max_replicas"]
        _check_fits(tenant, asked, pods, priority, autoscaled=scaling is not None)
        workload = Workload.objects.create(
            tenant=tenant,
            name=name,
            kind=kind,
            image=image,
            command=command,
            args=args,
            env=env,
            labels=labels,
            resources={rc.slug: units for rc, units in asked},
            gpu_model=asked[0][0].gpu_model,
            priority_class=priority,
            replicas=replicas,
            backoff_limit=backoff_limit,
            max_replicas=scaling["max_replicas"] if scaling else None,
            target_gpu_util=scaling["target_gpu_util"] if scaling else None,
            target_latency_ms=scaling["target_latency_ms"] if scaling else None,
            namespace=tenant_namespace(tenant),
            submitted_by=actor,
        )
        workload.k8s_name = f"{name}-{workload.pk}"
        workload.save(update_fields=["k8s_name"])
        WorkloadEvent.objects.create(
            workload=workload, state=workload.state, reason="Submitted", message=f"by {actor}"
        )
        audit.record(
            actor=actor,
            verb="workload.submitted",
            obj=workload,
            tenant=tenant,
            after={
                **audit.snapshot(workload, ["name", "kind", "image", "priority_class", "state"]),
                "resources": workload.resources,
                "replicas": replicas,
                "autoscaling": workload.autoscaling,
            },
        )
        workload_id = workload.pk
        transaction.on_commit(lambda: _enqueue_create(workload_id))
    return workload


# --- the cluster side (called by tasks) -------------------------------------------------------


def _change_state(workload_id: int, obs: Observation, *, actor=None) -> Workload | None:
    """Move a workload to an observed state: one WorkloadEvent and one AuditEvent, under a row
    lock; nothing when the state is the same or the move is not allowed (already final)."""
    with transaction.atomic():
        workload = Workload.objects.select_for_update().select_related("tenant").get(pk=workload_id)
        if workload.state == obs.state:
            if (workload.reason, workload.message) != (obs.reason, obs.message):
                workload.reason, workload.message = obs.reason, obs.message
                workload.save(update_fields=["reason", "message", "updated_at"])
            return None
        if not workload.can_move_to(obs.state):
            return None
        before = audit.snapshot(workload, WORKLOAD_FIELDS)
        workload.move_to(obs.state, reason=obs.reason, message=obs.message)
        workload.save()
        WorkloadEvent.objects.create(
            workload=workload, state=obs.state, reason=obs.reason, message=obs.message
        )
        audit.record(
            actor=actor,
            verb=f"workload.{obs.state}",
            obj=workload,
            tenant=workload.tenant,
            before=before,
            after=audit.snapshot(workload, WORKLOAD_FIELDS),
        )
    return workload


def create_in_cluster(kube: KubeGateway, workload_id: int) -> Workload | None:
    """Apply the workload's Job or Deployment (server-side apply: safe to run twice). A
    permanent refusal by the API server (quota, Pod Security) fails the workload with its
    reason; transient errors propagate for the task to retry."""
    workload = Workload.objects.select_related("tenant").filter(pk=workload_id).first()
    if workload is None or workload.state != Workload.State.PENDING:
        return workload
    if workload.cluster_created_at is not None:
        return workload
    spec = spec_for(workload)
    manifest = render_workload(spec)
    try:
        live = kube.apply(manifest)
        uid = ((live or {}).get("metadata") or {}).get("uid", "")
        if spec.autoscaling is not None:
            kube.apply(render_hpa(spec, owner_uid=uid))
    except PermanentClusterError as exc:
        _change_state(workload.pk, Observation(Workload.State.FAILED, "Rejected", str(exc)))
        return Workload.objects.get(pk=workload.pk)
    with transaction.atomic():
        workload = Workload.objects.select_for_update().get(pk=workload.pk)
        workload.k8s_uid = uid
        workload.cluster_created_at = timezone.now()
        workload.save(update_fields=["k8s_uid", "cluster_created_at", "updated_at"])
        WorkloadEvent.objects.create(
            workload=workload,
            state=workload.state,
            reason="Created",
            message=f"{manifest['kind']} {workload.namespace}/{workload.k8s_name}"
            + (" with a HorizontalPodAutoscaler" if spec.autoscaling else ""),
        )
    return workload


def _kube_kind(workload: Workload) -> str:
    return "Job" if workload.kind == Workload.Kind.JOB else "Deployment"


def _pods(kube: KubeGateway, workload: Workload) -> list[dict]:
    pods = kube.list("Pod", workload.namespace, label_selector=f"{WORKLOAD_LABEL}={workload.pk}")
    return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True)


def sync_workload(kube: KubeGateway, workload_id: int) -> Workload | None:
    """Read the workload's object, pods and preemption events; record a change of state. A
    preempted Job is deleted so that it does not wait for room in the background."""
    workload = Workload.objects.select_related("tenant").filter(pk=workload_id).first()
    if workload is None or workload.is_final:
        return workload
    if workload.cluster_created_at is None:
        return create_in_cluster(kube, workload.pk)
    obj = kube.get(_kube_kind(workload), workload.k8s_name, workload.namespace)
    pods = _pods(kube, workload)
    # Events of the workload's pods (preemption) and of its Job or ReplicaSet (FailedCreate).
    events = [
        e
        for e in kube.list("Event", workload.namespace)
        if e.get("reason") in (*PREEMPTION_REASONS, "FailedCreate")
        and (
            (name := (e.get("involvedObject") or {}).get("name", "")) == workload.k8s_name
            or name.startswith(f"{workload.k8s_name}-")
        )
    ]
    obs = observe(workload.kind, obj, pods, events)
    changed = _change_state(workload.pk, obs)
    if (
        changed is not None
        and changed.state == Workload.State.PREEMPTED
        and workload.kind == Workload.Kind.JOB
    ):
        kube.delete("Job", workload.k8s_name, workload.namespace)
    return Workload.objects.get(pk=workload.pk)


def sync_live_workloads(kube: KubeGateway) -> int:
    """Sync every workload that is not over yet; returns how many were looked at."""
    ids = list(
        Workload.objects.filter(
            state__in=(*Workload.LIVE_STATES, Workload.State.PREEMPTED)
        ).values_list("pk", flat=True)
    )
    for pk in ids:
        try:
            sync_workload(kube, pk)
        except ClusterError as exc:
            log.warning("sync of workload %s failed: %s", pk, exc)
    return len(ids)


def cancel_workload(*, actor, workload: Workload) -> Workload:
    """Cancel: the state changes now, the cluster object is deleted after commit."""
    require_role(actor, workload.tenant, WRITE_ROLES, "cancel workloads")
    with transaction.atomic():
        locked = Workload.objects.select_for_update().get(pk=workload.pk)
        if not locked.can_move_to(Workload.State.CANCELLED):
            raise InvalidTransition(
                f"workload {locked.name} is {locked.state}: only pending, running or preempted "
                "workloads can be cancelled"
            )
    _change_state(
        workload.pk,
        Observation(Workload.State.CANCELLED, "Cancelled", f"by {actor}"),
        actor=actor,
    )
    workload_id = workload.pk
    transaction.on_commit(lambda: _enqueue_delete(workload_id))
    return Workload.objects.get(pk=workload.pk)


def _enqueue_delete(workload_id: int) -> None:
    from scheduler import tasks

    try:
        tasks.delete_workload.delay(workload_id=workload_id)
    except Exception:
        log.exception("could not queue the deletion of workload %s", workload_id)


def delete_from_cluster(kube: KubeGateway, workload_id: int) -> bool:
    """Delete the workload's object (and its HorizontalPodAutoscaler first, so that nothing
    scales a Deployment that is going away); True when something was deleted."""
    workload = Workload.objects.filter(pk=workload_id).first()
    if workload is None or not workload.k8s_name:
        return False
    if workload.max_replicas is not None:
        kube.delete("HorizontalPodAutoscaler", workload.k8s_name, workload.namespace)
    return kube.delete(
        _kube_kind(workload), workload.k8s_name, workload.namespace, propagation="Foreground"
    )


def workload_logs(
    kube: KubeGateway, *, actor, workload: Workload, tail_lines: int = 500
) -> tuple[str, str]:
    """(pod name, log) of the newest pod, where the cluster serves logs."""
    require_role(actor, workload.tenant, READ_ROLES, "read logs")
    if workload.cluster_created_at is None:
        raise LogsUnavailable(f"workload {workload.name} is not on the cluster yet")
    try:
        pods = _pods(kube, workload)
    except ClusterError as exc:
        raise LogsUnavailable(f"cannot list the pods of {workload.name}: {exc}") from exc
    if not pods:
        raise LogsUnavailable(f"workload {workload.name} has no pod (any more)")
    pod = pods[0]["metadata"]["name"]
    try:
        return pod, kube.pod_log(pod, workload.namespace, tail_lines=tail_lines)
    except ClusterError as exc:
        raise LogsUnavailable(
            f"the cluster does not serve the logs of pod {pod} ({exc}); simulated nodes have no "
            "containers and so no logs"
        ) from exc
