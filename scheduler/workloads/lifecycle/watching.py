"""The periodic workload sync: what changed on the cluster since the last run (one watch per
kind, from cursors kept in PostgreSQL), batch by batch as it arrives (`batches.py`), mapped to
the live workloads it concerns, each synced by `sync.py` from readings of their namespaces that
the run makes once and keeps up to date from the same watches; a full resync now and then
repairs whatever a watch missed."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Case, F, IntegerField, Value, When
from django.utils import timezone

from core.errors import ClusterError, PermanentClusterError
from core.locks import advisory_lock
from scheduler.cluster.kube import KubeGateway, ResourceVersionGone
from scheduler.workloads.kinds import owners
from scheduler.workloads.kinds.manifests import KUEUE_JOB_UID_LABEL
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.lifecycle.batches import Watched, change_batches
from scheduler.workloads.lifecycle.following import follow_new, stop_past_their_run_time
from scheduler.workloads.lifecycle.reading import (
    EVENT_REASONS,
    KEPT,
    NamespaceReading,
    apply_changes,
    list_queue_workloads,
    read_for,
)
from scheduler.workloads.lifecycle.side_by_side import (
    sync_all_live,
    sync_all_live_workloads,
    sync_each,
)
from scheduler.workloads.lifecycle.sync import named_after
from scheduler.workloads.models import Workload, WorkloadSyncState
from tenants import selectors

log = logging.getLogger(__name__)

SYNC_LOCK = (0x6777, 1)  # advisory-lock key: one periodic sync at a time, across workers
STATE_KEY = "workloads"


def watched_collections() -> tuple[Watched, ...]:
    """Cluster-wide and whole, so the cost is one watch per kind whatever the number of
    namespaces, and a run keeps the namespaces it read up to date from them (`reading.apply`)
    rather than reading them again: Jobs (a member's Job deleted as it finished leaves only the
    watch's last look at it), Deployments and pods (the members' too: a followed Job's pod
    starting shows as soon as the portal's own), Kueue's Workloads and the events (the events
    API selects fields by equality only, one reason at a time). `touched_workloads` picks out
    what concerns live workloads."""
    return tuple(Watched(kind) for kind in ("Job", "Deployment", "Pod", "KueueWorkload", "Event"))


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
    # Kueue's Workloads no live workload accounts for: work made outside the portal, perhaps
    # new (`following.follow_new` decides)
    unknown: list[dict] = field(default_factory=list)
    # Jobs seen deleted once finished and Kueue's Workloads seen finished, by namespace: how a
    # Job deleted as it finished ended
    ended: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))


def touched_workloads(changes: Mapping[str, list[dict]], live: Iterable[LiveRef]) -> Touched:
    """Map watch events (kind -> [{"type", "object"}]) to the live workloads they concern
    (pure): the portal's Jobs, Deployments and pods by the workload label, followed members'
    objects by uid and their pods by owner; Kueue's Workloads by the job-uid label, else by name
    (pod-<pod name>-<hash>); events by the object they involve (`named_after`), and only those
    `observe` reads (EVENT_REASONS)."""
    refs = list(live)
    by_id = {r.pk: r for r in refs}
    by_uid = {r.k8s_uid: r.pk for r in refs if r.k8s_uid}
    by_namespace: dict[str, list[LiveRef]] = defaultdict(list)
    by_name: dict[tuple[str, str], set[int]] = defaultdict(set)
    for ref in refs:
        by_namespace[ref.namespace].append(ref)
        by_name[(ref.namespace, ref.k8s_name)].add(ref.pk)

    def named(namespace: str, name: str) -> set[int]:
        # `named_after` by lookup of each base the name can carry, where a scan of the
        # namespace per event grew as events × workloads (issue 55)
        return {
            pk
            for base in _bases(name)
            for pk in by_name.get((namespace, base), ())
            if named_after(name, base)
        }

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
                elif meta.get("uid") in by_uid:  # a followed member's object
                    touched.ids.add(by_uid[meta["uid"]])
                elif kind == "Pod" and not wid:  # a followed member's pod, by its owner
                    touched.ids |= by_name.get((namespace, owners.owner_of_pod(obj).name), set())
                if kind == "Job" and event.get("type") == "DELETED" and owners.has_ended(obj):
                    touched.ended[namespace].append(obj)  # its last look: how it ended
            elif kind == "KueueWorkload":
                uid = labels.get(KUEUE_JOB_UID_LABEL, "")
                ids = {by_uid[uid]} if uid in by_uid else named(namespace, meta.get("name", ""))
                if not ids and event.get("type") != "DELETED":
                    touched.unknown.append(obj)
                if owners.is_finished(obj):  # ours, or one followed in this very run
                    touched.ended[namespace].append(obj)
                if namespace in by_namespace:
                    touched.queue_namespaces.add(namespace)
                    touched.ids |= ids
            elif kind == "Event" and event.get("type") != "DELETED":
                if obj.get("reason") not in EVENT_REASONS:
                    continue
                involved = obj.get("involvedObject") or {}
                touched.ids |= named(
                    involved.get("namespace") or namespace, involved.get("name", "")
                )
    return touched


def _bases(name: str) -> set[str]:
    """Every `base` that `named_after(name, base)` may hold for: the name itself, and each part
    before a dash, with or without a job- or pod- prefix."""
    out = {name}
    for prefix in ("", "job-", "pod-"):
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            out.update(rest[:i] for i, c in enumerate(rest) if c == "-" and i)
    return out


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


def refresh_queue_positions(
    kube: KubeGateway,
    namespaces: Iterable[str],
    readings: dict[str, NamespaceReading],
    synced: set[int],
) -> None:
    """Queued workloads keep their place in the queue up to date when the queue changes, also
    those nothing else changed for (their own Kueue Workload stays the same when the one ahead
    is admitted): one list of Kueue's Workloads per namespace not read yet, no GET; one query
    reads the waiting workloads of every namespace and one writes the places that moved."""
    waiting: dict[str, list[Workload]] = defaultdict(list)
    for workload in (
        Workload.objects.filter(
            namespace__in=list(namespaces),
            state=Workload.State.QUEUED,
            cluster_created_at__isnull=False,
        )
        .exclude(pk__in=synced)
        .only("pk", "namespace", "kind", "k8s_uid", "queue_position")
    ):
        waiting[workload.namespace].append(workload)
    moved: dict[int, int | None] = {}
    for namespace, workloads in waiting.items():
        reading = readings.get(namespace) or NamespaceReading(
            pods={}, events=[], queue_workloads=list_queue_workloads(kube, namespace)
        )
        if reading.queue_workloads is None:
            continue
        for workload in workloads:  # indexed and sorted once per namespace, not per workload
            mine = reading.queue_workloads_for(workload)
            position = reading.place(mine[0]) if mine else None
            if position != workload.queue_position:
                moved[workload.pk] = position
    place(moved)


def place(moved: Mapping[int, int | None], chunk: int = 500) -> None:
    """Write new places in their queues, a statement per `chunk` workloads (not one each: a
    deep queue placed for the first time moved thousands), to those still queued."""
    items, now = list(moved.items()), timezone.now()
    for start in range(0, len(items), chunk):
        part = items[start : start + chunk]
        Workload.objects.filter(pk__in=[pk for pk, _ in part], state=Workload.State.QUEUED).update(
            # the column as the default: a CASE of nothing but NULLs is text to PostgreSQL
            queue_position=Case(
                *(When(pk=pk, then=Value(p, output_field=IntegerField())) for pk, p in part),
                default=F("queue_position"),
                output_field=IntegerField(),
            ),
            updated_at=now,
        )


def _full_resync(kube: KubeGateway, state: WorkloadSyncState, watched: tuple[Watched, ...]) -> int:
    try:
        cursors = _take_cursors(kube, watched)
    except ClusterError as exc:  # no cursors: the next run is a full one again
        log.warning("workload sync cannot take watch cursors: %s", exc)
        return sync_all_live_workloads(kube)
    try:  # work made outside the portal and not followed yet: one list, cluster-wide
        queued: list[dict] | None = kube.list("KueueWorkload")
    except ClusterError as exc:
        log.warning("workload sync cannot read Kueue's Workloads: %s", exc)
        queued = None
    # the namespaces of live work, of work to follow and of every active team (read now, kept
    # and followed from the watches, not read one by one as a burst's first Jobs come: issue
    # 55): the cluster whole, if it pays
    namespaces = (
        set(Workload.objects.live().values_list("namespace", flat=True))
        | {
            w["metadata"].get("namespace", "")
            for w in queued or []
            if w.get("metadata") and not owners.is_finished(w)
        }
        | selectors.active_namespaces()
    )
    readings = read_for(kube, namespaces, len(namespaces), queued)
    if queued is not None:
        try:
            follow_new(kube, queued, readings)
        except ClusterError as exc:  # the next full resync follows it
            log.warning("work made outside the portal not followed yet: %s", exc)
    # a Job gone as the cluster was read: its end is in the next run's watch (retried there)
    looked_at, failed, readings = sync_all_live(kube, readings, defer_gone=True)
    # those whose sync failed are retried by the next run, not the next full resync
    state.cursors, state.retry_ids, state.full_sync_at = cursors, failed, timezone.now()
    state.save()
    # read after the cursors were taken: the next run's watches bring them up to date
    KEPT.keep(cursors, readings)
    return looked_at


def sync_live_workloads(kube: KubeGateway, *, full: bool = False) -> int:
    """The periodic sync (beat, every SYNC_WORKLOADS_EVERY_S): read what changed on the cluster
    since the last run (one watch per kind, from the cursors kept in PostgreSQL, for
    SYNC_WORKLOADS_WATCH_S), batch by batch as it arrives; map each batch to the workloads it
    concerns and sync only those, plus, first, those whose last sync failed and those not on
    the cluster yet (a lost create message). An unchanged fleet costs a watch per kind,
    however many workloads it holds. A full resync (`sync_all_live_workloads`) runs on the
    first run, when a cursor has expired (410) and every SYNC_WORKLOADS_FULL_EVERY_S, and the
    run goes on watching from there (`full`: the resync alone). One run at a time: a run that
    finds another one running skips. Returns how many workloads were looked at."""
    with advisory_lock(*SYNC_LOCK) as acquired:
        if not acquired:
            log.info("workload sync skipped: another run holds the lock")
            return 0
        state, _ = WorkloadSyncState.objects.get_or_create(key=STATE_KEY)
        watched = watched_collections()
        due = state.full_sync_at is None or (
            (timezone.now() - state.full_sync_at).total_seconds()
            >= settings.SYNC_WORKLOADS_FULL_EVERY_S
        )
        looked_at = 0
        if full or due or any(w.kind not in state.cursors for w in watched):
            looked_at = _full_resync(kube, state, watched)
            # then the run watches from the cursors it took, as any run does: a run that ended
            # here left what changed after the read to the next beat, up to a period later
            if full or any(w.kind not in state.cursors for w in watched):
                return looked_at
        retry = set(state.retry_ids)
        cursors = dict(state.cursors)
        # this worker's last run's, if it ended where this one starts; each namespace is read
        # once, then kept up to date from the watches, within the run and for the next one
        readings = KEPT.take(cursors)
        live: list[tuple] = []
        ended: dict[str, list[dict]] = defaultdict(list)  # the run's, for all its syncs
        # those whose last sync failed and those not on the cluster yet (a lost create
        # message) first; a Job gone since the cursors waits for the watch to say how it
        # ended (its last look comes in a batch, which syncs it again); then each batch of
        # changes as it arrives
        looked, pending = _sync_changed(
            kube, {}, retry, readings, live, ended, uncreated=True, defer_gone=True
        )
        retry, looked_at = (retry - looked) | pending, looked_at + len(looked)
        try:
            for batch in change_batches(
                kube,
                state.cursors,
                watched,
                timeout_s=settings.SYNC_WORKLOADS_WATCH_S,
                gather_s=settings.SYNC_WORKLOADS_BATCH_S,
            ):
                if batch.events:
                    looked, failed = _sync_changed(
                        kube, batch.events, set(), readings, live, ended, uncreated=False
                    )
                    retry, looked_at = (retry - looked) | failed, looked_at + len(looked)
                    pending -= looked
                cursors.update(batch.cursors)  # synced up to here
            if pending:  # the watches saw everything since the cursors: one still gone
                # without a word of how it ended was deleted
                looked, failed = _sync_changed(kube, {}, pending, readings, live, ended)
                retry = (retry - looked) | failed
        except ResourceVersionGone as exc:
            log.info("a watch cursor expired, resyncing all workloads: %s", exc)
            return looked_at + _full_resync(kube, state, watched)
        except ClusterError as exc:  # what was not synced yet is read again next run
            log.warning("workload sync cannot read the cluster's changes: %s", exc)
        state.cursors, state.retry_ids = cursors, sorted(retry)
        state.save(update_fields=["cursors", "retry_ids", "updated_at"])
        # up to date with the cursors saved: every namespace read, with live work or not (an
        # idle team's next Job would read it again), as an informer keeps what it watches
        KEPT.keep(cursors, readings)
        try:
            stop_past_their_run_time(kube)
        except ClusterError as exc:  # still running: the next run stops it
            log.warning("followed jobs past their run time not stopped: %s", exc)
        return looked_at


def _sync_changed(
    kube: KubeGateway,
    changes: Mapping[str, list[dict]],
    retry: set[int],
    readings: dict[str, NamespaceReading],
    live: list[tuple],
    ended: dict[str, list[dict]],
    *,
    uncreated: bool = False,
    defer_gone: bool = False,
) -> tuple[set[int], set[int]]:
    """Sync the live workloads a batch of changes concerns (and those in `retry`, and with
    `uncreated` those not on the cluster yet), follow the work made outside the portal it shows
    and refresh the places in the queues it moved. `readings`: the namespaces the run read so
    far, brought up to date with the batch and added to; `live`: the run's live workloads
    (pk, namespace, name, uid, made on the cluster), added to; `ended`: the run's last looks at
    what ended (`Touched.ended`), added to. Returns the workloads it looked at and those whose
    sync failed, or was deferred (`defer_gone`), to be tried again."""
    apply_changes(readings, changes)
    # the live workloads once a run, then only those made since (a batch comes every second
    # or so, and most touch none): one that ended meanwhile is skipped by `sync_each`
    live.extend(
        Workload.objects.live()
        .filter(pk__gt=live[-1][0] if live else 0)
        .order_by("pk")
        .values_list("pk", "namespace", "k8s_name", "k8s_uid", "cluster_created_at")
    )
    touched = touched_workloads(
        changes, (LiveRef(pk, ns, name, uid) for pk, ns, name, uid, _ in live)
    )
    for namespace, objs in touched.ended.items():
        ended[namespace].extend(objs)
    todo = [
        (pk, ns)
        for pk, ns, _, _, created in live
        if pk in touched.ids or pk in retry or (uncreated and created is None)
    ]
    if not todo and not touched.unknown and not touched.queue_namespaces:
        return set(), set()
    # many namespaces not read yet in this run: the cluster whole, in a few lists
    unread = {ns for _, ns in todo} | touched.queue_namespaces
    unread |= {(w.get("metadata") or {}).get("namespace", "") for w in touched.unknown}
    readings.update(read_for(kube, unread - set(readings), len({ns for _, ns, *_ in live})))
    if touched.unknown:
        try:  # one that fails is followed by the next full resync, the rest go on now
            new = follow_new(kube, touched.unknown, readings)
        except ClusterError as exc:
            log.warning("work made outside the portal not followed yet: %s", exc)
            new = []
        todo += list(Workload.objects.filter(pk__in=new).values_list("pk", "namespace"))
    read, failed = sync_each(kube, todo, readings, ended=ended, defer_gone=defer_gone)
    readings.update(read)  # and those it read one by one
    try:
        refresh_queue_positions(
            kube, sorted(touched.queue_namespaces), readings, {pk for pk, _ in todo}
        )
    except ClusterError as exc:
        log.warning("queue places not refreshed: %s", exc)
    return {pk for pk, _ in todo}, set(failed)
