"""Following a workload on the cluster, called by tasks: create its object, read what the
cluster did with it (running, preempted, failed) and record each change of state, delete it,
read its logs. All through `scheduler.cluster.kube`, the one door to the API server."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.errors import ClusterError, PermanentClusterError, ServiceError, TransientClusterError
from scheduler.catalog.models import ResourceClass
from scheduler.catalog.product_labels import product_label
from scheduler.cluster.kube import Changes, KubeGateway, ResourceVersionGone
from scheduler.cluster.render.labels import INSTANCE_LABEL
from scheduler.workloads.manifests import (
    KUEUE_JOB_UID_LABEL,
    PREEMPTION_REASONS,
    WORKLOAD_LABEL,
    AutoscalingSpec,
    Observation,
    WorkloadSpec,
    claim_mounts,
    env_values,
    observe,
    queue_position,
    render_hpa,
    render_workload,
)
from scheduler.workloads.models import Workload, WorkloadEvent, WorkloadSyncState
from tenants import audit
from tenants.notifications import notify
from tenants.permissions import READ_ROLES, require_role

log = logging.getLogger(__name__)

WORKLOAD_FIELDS = ["state", "reason"]
# The cluster events `observe` reads: preemptions, and pods the API server refused to create.
EVENT_REASONS = frozenset({*PREEMPTION_REASONS, "FailedCreate"})


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
        gpu_product=product_label(workload.gpu_model),
        priority_class=workload.priority_class,
        gpus={classes[s].resource_name: int(n) for s, n in workload.resources.items()},
        command=tuple(workload.command or ()),
        args=tuple(workload.args or ()),
        env=env_values(workload.env or {}),
        labels=dict(workload.labels or {}),
        replicas=workload.replicas,
        backoff_limit=workload.backoff_limit,
        instance=settings.PORTAL_INSTANCE,
        autoscaling=_autoscaling_spec(workload),
        cpu=workload.cpu,
        memory=workload.memory,
        ephemeral_storage=workload.ephemeral_storage,
        shm=workload.shm,
        volumes=claim_mounts(workload.volumes or []),
        env_from_secrets=tuple(workload.env_from_secrets or ()),
        image_pull_secrets=tuple(workload.image_pull_secrets or ()),
        tolerations=tuple(settings.GPU_NODE_TOLERATIONS),
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


def change_state(
    workload_id: int, obs: Observation, *, actor=None, position: int | None = None
) -> Workload | None:
    """Move a workload to an observed state: one WorkloadEvent and one AuditEvent, under a row
    lock; nothing when the state is the same or the move is not allowed (already final). A
    queued workload's place in its queue is kept up to date without an event."""
    with transaction.atomic():
        workload = Workload.objects.select_for_update().select_related("tenant").get(pk=workload_id)
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
        workload.move_to(obs.state, reason=obs.reason, message=obs.message)
        workload.queue_position = position
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
        if obs.state in (Workload.State.FAILED, Workload.State.PREEMPTED):
            _notify_ended_badly(workload, obs)
    return workload


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
        if spec.autoscaling is not None:
            kube.apply(render_hpa(spec, owner_uid=uid))
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
            + (" with a HorizontalPodAutoscaler" if spec.autoscaling else ""),
        )
    return workload


def _kube_kind(workload: Workload) -> str:
    return "Job" if workload.kind == Workload.Kind.JOB else "Deployment"


def _newest_first(pods: list[dict]) -> list[dict]:
    return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True)


def _pods(kube: KubeGateway, workload: Workload) -> list[dict]:
    pods = kube.list("Pod", workload.namespace, label_selector=f"{WORKLOAD_LABEL}={workload.pk}")
    return _newest_first(pods)


def _list_queue_workloads(kube: KubeGateway, namespace: str) -> list[dict] | None:
    """Kueue's Workloads in a namespace (None where Kueue is not installed)."""
    try:
        return kube.list("KueueWorkload", namespace)
    except PermanentClusterError:
        return None


@dataclass
class NamespaceReading:
    """One namespace as the periodic sync reads it once for all its workloads: the portal's
    pods by workload id, the events and Kueue's Workloads (three list calls per namespace,
    instead of three per workload)."""

    pods: dict[str, list[dict]]
    events: list[dict]
    queue_workloads: list[dict] | None


def read_namespace(kube: KubeGateway, namespace: str) -> NamespaceReading:
    pods: dict[str, list[dict]] = defaultdict(list)
    for pod in kube.list("Pod", namespace, label_selector=WORKLOAD_LABEL):
        pods[(pod["metadata"].get("labels") or {}).get(WORKLOAD_LABEL, "")].append(pod)
    return NamespaceReading(
        pods={k: _newest_first(v) for k, v in pods.items()},
        events=kube.list("Event", namespace),
        queue_workloads=_list_queue_workloads(kube, namespace),
    )


def _mine(workload: Workload, queue_workloads: list[dict]) -> list[dict]:
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


def _named_after(name: str, base: str) -> bool:
    """An object named after a workload's Job or Deployment `base`: the object itself, its pods
    or ReplicaSets, or Kueue's Workloads for them (job-<name>-<hash>, pod-<pod name>-<hash>)."""
    return bool(base) and (
        name == base or any(name.startswith(f"{prefix}{base}-") for prefix in ("", "job-", "pod-"))
    )


def _involves(event: dict, workload: Workload) -> bool:
    """An event of the workload's Job or Deployment, its pods or ReplicaSets, or of Kueue's
    Workloads for them."""
    return _named_after((event.get("involvedObject") or {}).get("name", ""), workload.k8s_name)


def sync_workload(
    kube: KubeGateway, workload_id: int, reading: NamespaceReading | None = None
) -> Workload | None:
    """Read the workload's object, pods, events and Kueue's Workloads (from `reading` when the
    caller read its namespace already); record a change of state. Work that Kueue evicted is
    recorded as preempted and then queued again, with what Kueue said took its place."""
    workload = Workload.objects.select_related("tenant").filter(pk=workload_id).first()
    if workload is None or workload.is_final:
        return workload
    if workload.cluster_created_at is None:
        return create_in_cluster(kube, workload.pk)
    obj = kube.get(_kube_kind(workload), workload.k8s_name, workload.namespace)
    if reading is None:
        pods = _pods(kube, workload)
        all_events = kube.list("Event", workload.namespace)
        queue_workloads = _list_queue_workloads(kube, workload.namespace)
    else:
        pods = reading.pods.get(str(workload.pk), [])
        all_events, queue_workloads = reading.events, reading.queue_workloads
    events = [e for e in all_events if e.get("reason") in EVENT_REASONS and _involves(e, workload)]
    mine = _mine(workload, queue_workloads) if queue_workloads is not None else None
    obs = observe(workload.kind, obj, pods, events, mine)
    position = None
    if obs.state == Workload.State.QUEUED and mine:
        position = queue_position(mine[0], queue_workloads or [])
    if (
        obs.state == Workload.State.QUEUED
        and obs.reason == "Preempted"
        and workload.state not in (Workload.State.QUEUED, Workload.State.PREEMPTED)
    ):
        change_state(workload.pk, Observation(Workload.State.PREEMPTED, "Preempted", obs.message))
    change_state(workload.pk, obs, position=position)
    return Workload.objects.get(pk=workload.pk)


def _sync_each(
    kube: KubeGateway, workloads: Iterable[tuple[int, str]]
) -> tuple[dict[str, NamespaceReading], list[int]]:
    """Sync (workload id, namespace) pairs, reading each namespace once; returns the readings
    and the ids whose sync failed on a cluster error (logged)."""
    readings: dict[str, NamespaceReading] = {}
    failed: list[int] = []
    for pk, namespace in workloads:
        try:
            if namespace not in readings:
                readings[namespace] = read_namespace(kube, namespace)
            sync_workload(kube, pk, readings[namespace])
        except ClusterError as exc:
            log.warning("sync of workload %s failed: %s", pk, exc)
            failed.append(pk)
    return readings, failed


def sync_all_live_workloads(kube: KubeGateway) -> int:
    """The full, level-triggered sync: every workload that is not over yet, reading each
    namespace once (3 lists a namespace and a GET a workload); returns how many were looked
    at. The periodic sync falls back to it (first run, expired cursors, and every
    SYNC_WORKLOADS_FULL_EVERY_S), so whatever a watch missed is repaired."""
    return _sync_all_live(kube)[0]


def _sync_all_live(kube: KubeGateway) -> tuple[int, list[int]]:
    """How many live workloads the full sync looked at, and the ids whose sync failed."""
    live = list(Workload.objects.live().values_list("pk", "namespace"))
    _, failed = _sync_each(kube, live)
    return len(live), failed


# --- the periodic sync: what changed since the last run (watch), not the whole fleet --------

SYNC_LOCK = (0x6777, 1)  # advisory-lock key: one periodic sync at a time, across workers
STATE_KEY = "workloads"


@dataclass(frozen=True)
class Watched:
    """A collection the periodic sync follows with a watch cursor."""

    kind: str
    label_selector: str = ""
    field_selector: str = ""


def watched_collections(instance: str) -> tuple[Watched, ...]:
    """Cluster-wide, so the cost is one watch per kind whatever the number of namespaces: the
    portal's own objects and pods by label; Kueue's Workloads and the events carry no label of
    ours (the events API selects fields by equality only, one reason at a time), so they are
    read whole and filtered by `touched_workloads`."""
    ours = f"{INSTANCE_LABEL}={instance},{WORKLOAD_LABEL}"
    return (
        Watched("Job", ours),
        Watched("Deployment", ours),
        Watched("Pod", ours),
        Watched("KueueWorkload"),
        Watched("Event"),
    )


@dataclass(frozen=True)
class LiveRef:
    """What mapping a change to a workload needs to know of a live workload."""

    pk: int
    namespace: str
    k8s_name: str
    k8s_uid: str = ""


@dataclass
class Touched:
    """Workloads a batch of changes concerns, and the namespaces whose Kueue queue changed (the
    places of the workloads waiting there may have moved)."""

    ids: set[int] = field(default_factory=set)
    queue_namespaces: set[str] = field(default_factory=set)


def touched_workloads(changes: Mapping[str, list[dict]], live: Iterable[LiveRef]) -> Touched:
    """Map watch events (kind -> [{"type", "object"}]) to the live workloads they concern
    (pure): the portal's Jobs, Deployments and pods by the workload label; Kueue's Workloads by
    the job-uid label, else by name (pod-<pod name>-<hash>); events by the object they involve
    (`_named_after`), and only those `observe` reads (EVENT_REASONS)."""
    refs = list(live)
    by_id = {r.pk: r for r in refs}
    by_uid = {r.k8s_uid: r.pk for r in refs if r.k8s_uid}
    by_namespace: dict[str, list[LiveRef]] = defaultdict(list)
    for ref in refs:
        by_namespace[ref.namespace].append(ref)

    def named(namespace: str, name: str) -> set[int]:
        return {r.pk for r in by_namespace.get(namespace, ()) if _named_after(name, r.k8s_name)}

    touched = Touched()
    for kind, events in changes.items():
        for event in events:
            obj = event.get("object") or {}
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            namespace = meta.get("namespace", "")
            if kind in ("Job", "Deployment", "Pod"):
                wid = labels.get(WORKLOAD_LABEL, "")
                if wid.isdigit() and int(wid) in by_id and by_id[int(wid)].namespace == namespace:
                    touched.ids.add(int(wid))
            elif kind == "KueueWorkload":
                if namespace not in by_namespace:
                    continue
                touched.queue_namespaces.add(namespace)
                uid = labels.get(KUEUE_JOB_UID_LABEL, "")
                if uid in by_uid:
                    touched.ids.add(by_uid[uid])
                else:
                    touched.ids |= named(namespace, meta.get("name", ""))
            elif kind == "Event" and event.get("type") != "DELETED":
                if obj.get("reason") not in EVENT_REASONS:
                    continue
                involved = obj.get("involvedObject") or {}
                touched.ids |= named(
                    involved.get("namespace") or namespace, involved.get("name", "")
                )
    return touched


@contextmanager
def _sync_lock() -> Iterator[bool]:
    """A session-level advisory lock (not a row lock: the sync runs for seconds and commits
    each workload's change at once); yields whether this run got it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", list(SYNC_LOCK))
        (acquired,) = cursor.fetchone()
    try:
        yield acquired
    finally:
        if acquired:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", list(SYNC_LOCK))


def _take_cursors(kube: KubeGateway, watched: Iterable[Watched]) -> dict[str, str | None]:
    """A cursor per collection: its resourceVersion now, from a one-item list (None where the
    cluster does not serve the kind, e.g. no Kueue). Taken before the full read, so a change
    made during it is read again next time rather than missed."""
    cursors: dict[str, str | None] = {}
    for w in watched:
        try:
            _, rv = kube.list_versioned(
                w.kind, label_selector=w.label_selector, field_selector=w.field_selector, limit=1
            )
        except PermanentClusterError as exc:
            if w.kind != "KueueWorkload":
                raise
            log.info("not watching Kueue's Workloads: %s", exc)
            rv = None
        cursors[w.kind] = rv
    return cursors


def _read_changes(
    kube: KubeGateway, cursors: Mapping[str, str | None], watched: Iterable[Watched]
) -> dict[str, Changes]:
    """Watch every collection from its cursor at once (each watch lasts the watch time, so one
    after the other would take that many times as long)."""
    todo = [w for w in watched if cursors.get(w.kind)]
    timeout = settings.SYNC_WORKLOADS_WATCH_S

    def one(w: Watched) -> Changes:
        return kube.changes(
            w.kind,
            str(cursors[w.kind]),
            label_selector=w.label_selector,
            field_selector=w.field_selector,
            timeout_s=timeout,
        )

    with ThreadPoolExecutor(max_workers=max(1, len(todo))) as pool:
        return dict(zip((w.kind for w in todo), pool.map(one, todo), strict=True))


def refresh_queue_positions(
    kube: KubeGateway,
    namespaces: Iterable[str],
    readings: dict[str, NamespaceReading],
    synced: set[int],
) -> None:
    """Queued workloads keep their place in the queue up to date when the queue changes, also
    those nothing else changed for (their own Kueue Workload stays the same when the one ahead
    is admitted): one list of Kueue's Workloads per namespace, no GET."""
    for namespace in namespaces:
        waiting = list(
            Workload.objects.filter(
                namespace=namespace, state=Workload.State.QUEUED, cluster_created_at__isnull=False
            ).exclude(pk__in=synced)
        )
        if not waiting:
            continue
        reading = readings.get(namespace)
        queue_workloads = (
            reading.queue_workloads if reading else _list_queue_workloads(kube, namespace)
        )
        if queue_workloads is None:
            continue
        for workload in waiting:
            mine = _mine(workload, queue_workloads)
            position = queue_position(mine[0], queue_workloads) if mine else None
            if position != workload.queue_position:
                Workload.objects.filter(pk=workload.pk, state=Workload.State.QUEUED).update(
                    queue_position=position, updated_at=timezone.now()
                )


def _full_resync(kube: KubeGateway, state: WorkloadSyncState, watched: tuple[Watched, ...]) -> int:
    try:
        cursors = _take_cursors(kube, watched)
    except ClusterError as exc:  # no cursors: the next run is a full one again
        log.warning("workload sync cannot take watch cursors: %s", exc)
        return sync_all_live_workloads(kube)
    looked_at, failed = _sync_all_live(kube)
    # those whose sync failed are retried by the next run, not the next full resync
    state.cursors, state.retry_ids, state.full_sync_at = cursors, failed, timezone.now()
    state.save()
    return looked_at


def sync_live_workloads(kube: KubeGateway, *, full: bool = False) -> int:
    """The periodic sync (beat, every SYNC_WORKLOADS_EVERY_S): read what changed on the cluster
    since the last run (one watch per kind, from the cursors kept in PostgreSQL), map it to
    the workloads it concerns and sync only those, plus those whose last sync failed and those
    not on the cluster yet (a lost create message). An unchanged fleet costs a watch per kind,
    however many workloads it holds. A full resync (`sync_all_live_workloads`) runs on the
    first run, when a cursor has expired (410) and every SYNC_WORKLOADS_FULL_EVERY_S. One run
    at a time: a run that finds another one running skips. Returns how many workloads were
    looked at."""
    with _sync_lock() as acquired:
        if not acquired:
            log.info("workload sync skipped: another run holds the lock")
            return 0
        state, _ = WorkloadSyncState.objects.get_or_create(key=STATE_KEY)
        watched = watched_collections(settings.PORTAL_INSTANCE)
        due = state.full_sync_at is None or (
            (timezone.now() - state.full_sync_at).total_seconds()
            >= settings.SYNC_WORKLOADS_FULL_EVERY_S
        )
        if full or due or any(w.kind not in state.cursors for w in watched):
            return _full_resync(kube, state, watched)
        try:
            changes = _read_changes(kube, state.cursors, watched)
        except ResourceVersionGone as exc:
            log.info("a watch cursor expired, resyncing all workloads: %s", exc)
            return _full_resync(kube, state, watched)
        except ClusterError as exc:  # cursors stay: the next run reads these changes again
            log.warning("workload sync cannot read the cluster's changes: %s", exc)
            return 0
        live = list(
            Workload.objects.live().values_list(
                "pk", "namespace", "k8s_name", "k8s_uid", "cluster_created_at"
            )
        )
        touched = touched_workloads(
            {kind: c.events for kind, c in changes.items()},
            (LiveRef(pk, ns, name, uid) for pk, ns, name, uid, _ in live),
        )
        retry = set(state.retry_ids)
        todo = [
            (pk, ns)
            for pk, ns, _, _, created in live
            if pk in touched.ids or pk in retry or created is None
        ]
        readings, failed = _sync_each(kube, todo)
        try:
            refresh_queue_positions(
                kube, sorted(touched.queue_namespaces), readings, {pk for pk, _ in todo}
            )
        except ClusterError as exc:
            log.warning("queue places not refreshed: %s", exc)
        state.cursors = {**state.cursors, **{k: c.resource_version for k, c in changes.items()}}
        state.retry_ids = failed
        state.save(update_fields=["cursors", "retry_ids", "updated_at"])
        return len(todo)


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
