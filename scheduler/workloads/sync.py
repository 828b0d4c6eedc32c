"""Following a workload on the cluster, called by tasks: create its object, read what the
cluster did with it (running, preempted, failed) and record each change of state, delete it,
read its logs. All through `scheduler.cluster.kube`, the one door to the API server."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import ClusterError, PermanentClusterError, ServiceError
from scheduler.catalog.models import ResourceClass
from scheduler.cluster.kube import KubeGateway
from scheduler.workloads.manifests import (
    PREEMPTION_REASONS,
    WORKLOAD_LABEL,
    AutoscalingSpec,
    Observation,
    WorkloadSpec,
    observe,
    render_hpa,
    render_workload,
)
from scheduler.workloads.models import Workload, WorkloadEvent
from tenants import audit
from tenants.permissions import READ_ROLES, require_role

log = logging.getLogger(__name__)

WORKLOAD_FIELDS = ["state", "reason"]


class LogsUnavailable(ServiceError):
    code = "logs_unavailable"
    status = 409


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


def change_state(workload_id: int, obs: Observation, *, actor=None) -> Workload | None:
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
        change_state(workload.pk, Observation(Workload.State.FAILED, "Rejected", str(exc)))
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
    changed = change_state(workload.pk, obs)
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
