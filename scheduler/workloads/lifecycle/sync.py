"""Following one workload on the cluster, called by tasks: create its object, read what the
cluster did with it (its object, pods, events and Kueue's Workloads: running, preempted, failed)
and record each change of state, delete it. All through `scheduler.cluster.kube`, the one door to
the API server. The periodic, change-driven sync over the fleet is `watching.py`; logs are
`logs.py`; the manifests' input from a workload row is `kinds/from_row.py`."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from catalog import run_limits
from catalog.models import ResourceClass
from catalog.product_labels import configured_product_labels
from core import audit
from core.errors import ClusterError, PermanentClusterError, TransientClusterError
from scheduler.cluster.kube import KubeGateway
from scheduler.workloads.kinds import gang, owners, serving
from scheduler.workloads.kinds.from_row import spec_for
from scheduler.workloads.kinds.manifests import (
    KUEUE_JOB_UID_LABEL,
    Observation,
    observe,
    queue_position,
    render_hpa,
    render_service,
    render_workload,
)
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.lifecycle import placed
from scheduler.workloads.lifecycle.reading import (
    EVENT_REASONS,
    NamespaceReading,
    list_queue_workloads,
    newest_first,
)
from scheduler.workloads.models import Workload, WorkloadEvent
from tenants.notifications import notify

log = logging.getLogger(__name__)

WORKLOAD_FIELDS = ["state", "reason"]
# What a change of state writes (`Workload.move_to`, the queue's place), not the whole row.
MOVED_FIELDS = [
    "state",
    "reason",
    "message",
    "started_at",
    "finished_at",
    "queue_position",
    "updated_at",
]


class GoneUnseen(ClusterError):
    """A Job gone from the cluster that a full read cannot say the end of: the next run can
    (its watch began before the read), so its sync is retried there."""


def change_state(
    workload_id: int, obs: Observation, *, actor=None, position: int | None = None
) -> Workload | None:
    """Move a workload to an observed state: one WorkloadEvent and one AuditEvent, under a row
    lock; nothing when the state is the same or the move is not allowed (already final). A
    queued workload's place in its queue is kept up to date without an event."""
    with transaction.atomic():
        return _move(_locked(workload_id), obs, actor=actor, position=position)


def record_observed(workload_id: int, obs: Observation, *, position: int | None) -> Workload:
    """What a sync saw, recorded under one row lock in one transaction: nothing for a workload
    given back for idleness (it stays so until resumed, suspending.py, or it ends); work Kueue
    evicted and queued again is recorded as preempted first. The row as it now is."""
    with transaction.atomic():
        workload = _locked(workload_id)
        if workload.state == Workload.State.SUSPENDED and obs.state not in Workload.FINAL_STATES:
            return workload
        if (
            obs.state == Workload.State.QUEUED
            and obs.reason == "Preempted"
            and workload.state not in (Workload.State.QUEUED, Workload.State.PREEMPTED)
        ):
            preempted = Observation(Workload.State.PREEMPTED, "Preempted", obs.message)
            _move(workload, preempted, actor=None, position=None)
        _move(workload, obs, actor=None, position=position)
        return workload


def _locked(workload_id: int) -> Workload:
    return (
        Workload.objects.select_for_update(of=("self",))
        .select_related("tenant")
        .get(pk=workload_id)
    )


def _move(workload: Workload, obs: Observation, *, actor, position: int | None) -> Workload | None:
    """`change_state` on a row locked by the caller's transaction (changed in place)."""
    if obs.state != Workload.State.QUEUED:
        position = None
    if workload.state == obs.state:
        now = (obs.reason, obs.message, position)
        if (workload.reason, workload.message, workload.queue_position) != now:
            workload.reason, workload.message, workload.queue_position = now
            workload.save(update_fields=["reason", "message", "queue_position", "updated_at"])
        return None
    if not workload.can_move_to(obs.state):
        return None
    before = audit.snapshot(workload, WORKLOAD_FIELDS)
    first_start = workload.started_at is None
    workload.move_to(
        obs.state,
        reason=obs.reason,
        message=obs.message,
        started_at=obs.started_at,
        finished_at=obs.finished_at,
    )
    workload.queue_position = position
    workload.save(update_fields=MOVED_FIELDS)
    # The history says when a change happened on the cluster, where known, in the order the
    # portal saw the changes (the cluster's times are whole seconds: never before the last).
    when, from_cluster = timezone.now(), False
    if workload.is_final and workload.finished_at:
        when, from_cluster = workload.finished_at, obs.finished_at is not None
    elif obs.state == Workload.State.RUNNING and first_start and workload.started_at:
        when, from_cluster = workload.started_at, obs.started_at is not None
    ran_unseen = None
    if first_start and obs.state != Workload.State.RUNNING:
        ran_unseen = workload.started_at
    # Every event's time is at most when it was written (`move_to` keeps the cluster's times
    # within the portal's), so only a time taken from the cluster may fall before the last.
    last = when
    if from_cluster or ran_unseen:
        last = workload.events.aggregate(at=Max("created_at"))["at"] or workload.created_at
    if ran_unseen:
        # it ran and ended between two looks: its history says when it started all the same
        last = max(last, ran_unseen)
        WorkloadEvent.objects.create(
            workload=workload,
            created_at=last,
            state=Workload.State.RUNNING,
            reason="Running",
            message="started and ended between two looks at the cluster",
        )
    WorkloadEvent.objects.create(
        workload=workload,
        created_at=max(when, last),
        state=obs.state,
        reason=obs.reason,
        message=obs.message,
    )
    audit.record(
        actor=actor,
        verb=f"workload.{obs.state}",
        obj=workload,
        tenant=workload.tenant,
        before=before,
        after=audit.snapshot(workload, WORKLOAD_FIELDS),
    )
    if obs.state in (Workload.State.FAILED, Workload.State.PREEMPTED):
        _notify_ended_badly(workload, obs)
    return workload


def record_scale(workload_id: int, held: int, desired: int | None) -> None:
    """Keep an autoscaled deployment's pods holding quota (what its team's usage counts) and
    the replicas its autoscaler wants; each change of the wanted replicas is a `Scaled` event,
    the page's history of its size. The autoscaler's doing, not the portal's: no audit."""
    with transaction.atomic():
        workload = Workload.objects.select_for_update().get(pk=workload_id)
        if (workload.held_replicas, workload.desired_replicas) == (held, desired):
            return
        was = workload.desired_replicas if workload.desired_replicas is not None else None
        if desired is not None and desired != (was if was is not None else workload.replicas):
            WorkloadEvent.objects.create(
                workload=workload,
                state=workload.state,
                reason="Scaled",
                message=f"{was if was is not None else workload.replicas} → {desired} replicas"
                f" ({held} admitted)",
            )
        workload.held_replicas, workload.desired_replicas = held, desired
        workload.save(update_fields=["held_replicas", "desired_replicas", "updated_at"])


def _notify_ended_badly(workload: Workload, obs: Observation) -> None:
    """Tell the submitter and the team's channels (sent by Celery after commit)."""
    detail = ": ".join(part for part in (obs.reason, obs.message) if part)
    notify(
        f"workload.{obs.state}",
        workload.tenant,
        subject=f"[GPU Portal] {workload.tenant.slug}/{workload.name} {obs.state}",
        text=f"Workload {workload.name} of {workload.tenant.slug} {obs.state}: {detail}",
        data={"workload": workload.pk, "name": workload.name, "reason": obs.reason},
        person=workload.submitted_by,
    )


def create_in_cluster(kube: KubeGateway, workload_id: int) -> Workload | None:
    """Apply the workload's Job or Deployment (server-side apply: safe to run twice). A
    permanent refusal by the API server (quota, Pod Security) fails the workload with its
    reason; while the cluster cannot take it (API server or Kueue's webhook down) it waits as
    `queued` and the error propagates for the task to retry."""
    workload = Workload.objects.select_related("tenant").filter(pk=workload_id).first()
    if workload is None or workload.state not in (Workload.State.PENDING, Workload.State.QUEUED):
        return workload
    if workload.cluster_created_at is not None:
        return workload
    spec = spec_for(workload)
    manifest = render_workload(spec)
    try:
        live = kube.apply(manifest)
        uid = ((live or {}).get("metadata") or {}).get("uid", "")
        if spec.ports:  # an inference service: owned by the Deployment, deleted with it
            kube.apply(render_service(spec, owner_uid=uid))
        if spec.autoscaling is not None:
            kube.apply(render_hpa(spec, owner_uid=uid))
        if gang.is_gang(spec):  # owned by the Job: deleted with it
            kube.apply(gang.render_gang_service(spec, owner_uid=uid))
    except PermanentClusterError as exc:
        change_state(workload.pk, Observation(Workload.State.FAILED, "Rejected", str(exc)))
        return Workload.objects.get(pk=workload.pk)
    except TransientClusterError as exc:
        change_state(
            workload.pk,
            Observation(
                Workload.State.QUEUED,
                "WaitingForCluster",
                f"the cluster cannot take the workload yet; the portal keeps trying ({exc})",
            ),
        )
        raise
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
            + (" with a Service" if spec.ports else "")
            + (" with a HorizontalPodAutoscaler" if spec.autoscaling else "")
            + (f" of {spec.replicas} pods with a headless Service" if gang.is_gang(spec) else ""),
        )
    return workload


def _kube_kind(workload: Workload) -> str:
    if workload.owner_kind:  # made outside the portal: its own object (following.py)
        return workload.owner_kind
    return "Job" if workload.kind == Workload.Kind.JOB else "Deployment"


def workload_pods(kube: KubeGateway, workload: Workload) -> list[dict]:
    if workload.owner_kind:  # no label of the portal's: its pods are those its object owns
        pods = owners.own_pods(
            workload.owner_kind,
            workload.k8s_name,
            workload.k8s_uid,
            kube.list("Pod", workload.namespace),
        )
    else:
        pods = kube.list(
            "Pod", workload.namespace, label_selector=f"{WORKLOAD_LABEL}={workload.pk}"
        )
    return newest_first(pods)


def queue_workloads_of(workload: Workload, queue_workloads: list[dict]) -> list[dict]:
    """Kueue's Workloads for this workload's Job (newest first); for a Deployment all of the
    namespace's (`observe` picks those its pods own)."""
    if workload.kind != Workload.Kind.JOB:
        return queue_workloads
    mine = [
        w
        for w in queue_workloads
        if (w["metadata"].get("labels") or {}).get(KUEUE_JOB_UID_LABEL) == workload.k8s_uid
    ]
    return sorted(mine, key=lambda w: w["metadata"].get("creationTimestamp") or "", reverse=True)


def named_after(name: str, base: str) -> bool:
    """An object named after a workload's Job or Deployment `base`: the object itself, its pods
    or ReplicaSets, or Kueue's Workloads for them (job-<name>-<hash>, pod-<pod name>-<hash>)."""
    return bool(base) and (
        name == base or any(name.startswith(f"{prefix}{base}-") for prefix in ("", "job-", "pod-"))
    )


def _involves(event: dict, workload: Workload) -> bool:
    """An event of the workload's Job or Deployment, its pods or ReplicaSets, or of Kueue's
    Workloads for them."""
    return named_after((event.get("involvedObject") or {}).get("name", ""), workload.k8s_name)


def sync_workload(
    kube: KubeGateway,
    workload_id: int,
    reading: NamespaceReading | None = None,
    *,
    row: Workload | None = None,
    ended: Iterable[dict] = (),
    defer_gone: bool = False,
) -> Workload | None:
    """Read the workload's object, pods, events and Kueue's Workloads (from `reading` when the
    caller read its namespace already); record a change of state. Work that Kueue evicted is
    recorded as preempted and then queued again, with what Kueue said took its place. `row`:
    the workload as the caller read it with many others (a change is made under a lock of its
    own row, read again). `ended`: Jobs of the namespace a watch saw deleted once finished, and
    Kueue Workloads it saw finish (a Job deleted as it finished ended as its last look or its
    Workload says, not as deleted). `defer_gone`: a full read, with no watch to say how a Job
    that went away ended, leaves that to the next run (`GoneUnseen`, a cluster error: the
    caller retries it there)."""
    workload = row or Workload.objects.select_related("tenant").filter(pk=workload_id).first()
    if workload is None or workload.is_final:
        return workload
    if workload.cluster_created_at is None:
        return create_in_cluster(kube, workload.pk)
    if reading is None:
        obj = kube.get(_kube_kind(workload), workload.k8s_name, workload.namespace)
        pods = workload_pods(kube, workload)
        all_events = kube.list("Event", workload.namespace)
        queue_workloads = list_queue_workloads(kube, workload.namespace)
    else:
        obj = reading.object(  # made as the reading began: GOT, the reading may lack it
            kube,
            _kube_kind(workload),
            workload.k8s_name,
            workload.namespace,
            made=workload.cluster_created_at,
        )
        all_events, queue_workloads = reading.observed_events(), reading.queue_workloads
        pods = (
            newest_first(
                owners.own_pods(
                    workload.owner_kind, workload.k8s_name, workload.k8s_uid, reading.all_pods
                )
            )
            if workload.owner_kind
            else reading.pods.get(str(workload.pk), [])
        )
    events = [e for e in all_events if e.get("reason") in EVENT_REASONS and _involves(e, workload)]
    mine: list[dict] | None
    if workload.owner_kind:
        mine = owners.own_queue_workloads(
            workload.owner_kind, workload.k8s_uid, pods, queue_workloads or []
        )
        if workload.kind == Workload.Kind.JOB:
            obj = owners.as_job(workload.owner_kind, obj)
        elif queue_workloads is not None:
            mine = queue_workloads  # `observe` picks those its pods own
    elif queue_workloads is None:
        mine = None
    else:
        mine = (
            reading.queue_workloads_for(workload)
            if reading is not None
            else queue_workloads_of(workload, queue_workloads)
        )
    if workload.owner_kind and not workload.gpu_model and queue_workloads:
        _learn_the_model(workload, pods, queue_workloads)
    placed.record(workload, placed.worker_of(mine[0] if mine else None, workload.cluster))
    there = None
    if workload.cluster:  # dispatched by MultiKueue: its pods are on the worker
        there = placed.pods_there(workload, lambda door: workload_pods(door, workload))
        pods = pods if there is None else there
    if obj is None and workload.kind == Workload.Kind.JOB:  # gone: the watch's last look
        obj = next((o for o in ended if _is_its_job(o, workload)), None)
    obs = observe(workload.kind, obj, pods, events, mine)
    if obs.reason == "Deleted":
        obs = _ended_in_kueue(workload, ended) or obs
        if obs.reason == "Deleted" and defer_gone:
            raise GoneUnseen(f"the {_kube_kind(workload)} of workload {workload.pk} is gone")
    if workload.cluster and there is None and obs.state not in Workload.FINAL_STATES:
        obs = replace(obs, message=placed.unanswered(workload, obs.message))
    if obs.reason == "Preempted" and workload.kind == Workload.Kind.JOB and workload.replicas > 1:
        obs = replace(obs, message=gang.evicted_whole(workload.replicas, obs.message))
    if workload.max_replicas is not None and obj is not None:
        counts = serving.replica_counts(obj, pods)
        if counts != (workload.held_replicas, workload.desired_replicas):  # no lock otherwise
            record_scale(workload.pk, *counts)
    position = None
    if obs.state == Workload.State.QUEUED and mine:
        position = (
            reading.place(mine[0])
            if reading is not None
            else queue_position(mine[0], queue_workloads or [])
        )
    seen = (workload.state, workload.reason, workload.message, workload.queue_position)
    if seen == (obs.state, obs.reason, obs.message, position):
        return workload  # as it was read: no row lock, no write (most syncs of a busy fleet)
    if obs.state == workload.state:  # the same state said otherwise: no lock, no event
        Workload.objects.filter(pk=workload.pk, state=obs.state).update(
            reason=obs.reason,
            message=obs.message,
            queue_position=position,
            updated_at=timezone.now(),
        )
        workload.reason, workload.message, workload.queue_position = (
            obs.reason,
            obs.message,
            position,
        )
        return workload
    # decided on the row as it is (`row` was read with many others at the run's start)
    return record_observed(workload.pk, obs, position=position)


def _is_its_job(obj: dict, workload: Workload) -> bool:
    return obj.get("kind") == "Job" and (obj.get("metadata") or {}).get("uid") == workload.k8s_uid


def _ended_in_kueue(workload: Workload, ended: Iterable[dict]) -> Observation | None:
    """How a gone Job ended by the last look at its Kueue Workload (`owners.ended_as`)."""
    if workload.kind != Workload.Kind.JOB:
        return None
    mine = owners.own_queue_workloads(
        workload.owner_kind or "Job",
        workload.k8s_uid,
        [],
        [o for o in ended if o.get("kind") != "Job"],
    )
    return owners.ended_as(mine[0]) if mine else None


def _learn_the_model(workload: Workload, pods: list[dict], queue_workloads: list[dict]) -> None:
    """Work made outside the portal may name no model (nothing in its pods selects one): once
    Kueue admits it to a model's flavor, its ask is booked by that model's classes, with the
    run time they allow."""
    mine = owners.own_queue_workloads(workload.owner_kind, workload.k8s_uid, pods, queue_workloads)
    asked = owners.asked(mine[0], configured_product_labels()) if mine else None
    if asked is None or not asked.gpu_model:
        return
    limit = None
    if workload.kind == Workload.Kind.JOB:
        classes = ResourceClass.objects.filter(slug__in=asked.resources).select_related("pool")
        limit = run_limits.job_limit(workload.tenant.max_run_s, classes)
    Workload.objects.filter(pk=workload.pk, gpu_model="").update(
        gpu_model=asked.gpu_model, resources=asked.resources, max_run_s=limit
    )
    workload.gpu_model, workload.resources, workload.max_run_s = (
        asked.gpu_model,
        asked.resources,
        limit,
    )


def delete_from_cluster(kube: KubeGateway, workload_id: int) -> bool:
    """Delete the workload's object (and its HorizontalPodAutoscaler first, so that nothing
    scales a Deployment that is going away; its Service goes with it, by owner); True when
    something was deleted."""
    workload = Workload.objects.filter(pk=workload_id).first()
    if workload is None or not workload.k8s_name:
        return False
    if workload.max_replicas is not None:
        kube.delete("HorizontalPodAutoscaler", workload.k8s_name, workload.namespace)
    return kube.delete(
        _kube_kind(workload), workload.k8s_name, workload.namespace, propagation="Foreground"
    )
