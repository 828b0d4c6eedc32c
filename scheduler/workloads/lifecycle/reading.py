"""What the workload sync reads of the cluster once for many workloads: a namespace's pods, Jobs
and Deployments, the events it looks at and Kueue's Workloads, per namespace (five lists) or,
when a run reads many namespaces, cluster-wide (a few lists in all, whatever the number of
namespaces), brought up to date by the watches' later events, within a run and from one run of
a worker to its next (`KEPT`): an informer's cache, so that a run reads only namespaces it has
not seen. `sync.py` syncs each workload from a reading."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from core.errors import ClusterError, PermanentClusterError
from scheduler.cluster.kube import KubeGateway
from scheduler.workloads.kinds.manifests import (
    KUEUE_JOB_UID_LABEL,
    PREEMPTION_REASONS,
    queue_places,
)
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.models import Workload

log = logging.getLogger(__name__)

# The kinds a reading holds whole, so that a workload's own object needs no GET: the portal's
# own kinds, and what most work made outside it is.
HELD_KINDS = ("Job", "Deployment")
# The cluster events `observe` reads: preemptions, and pods the API server refused to create.
EVENT_REASONS = frozenset({*PREEMPTION_REASONS, "FailedCreate"})
# A reading vouches for what is absent only for objects made this long before it began (the
# time a row says its object was made is taken after the create returned, perhaps on another
# machine's clock): a younger one's object is GOT.
CLOCK_MARGIN = timedelta(seconds=2)
# A run reads cluster-wide when it would read at least SYNC_WORKLOADS_WIDE_FROM namespaces and
# this share of those with live work (fewer, and five lists each cost less than reading all).
WIDE_FROM_SHARE = 0.25


def newest_first(objects: list[dict]) -> list[dict]:
    return sorted(objects, key=lambda o: o["metadata"].get("creationTimestamp") or "", reverse=True)


def list_queue_workloads(kube: KubeGateway, namespace: str | None = None) -> list[dict] | None:
    """Kueue's Workloads in a namespace, or everywhere (None where Kueue is not installed)."""
    try:
        return kube.list("KueueWorkload", namespace)
    except PermanentClusterError:
        return None


@dataclass
class NamespaceReading:
    """One namespace as the sync reads it once for all its workloads: its pods (the portal's by
    workload id), the events and Kueue's Workloads, and objects by kind and name: its pods, Jobs
    and Deployments."""

    pods: dict[str, list[dict]]
    events: list[dict]  # those `observe` reads (EVENT_REASONS)
    queue_workloads: list[dict] | None
    all_pods: list[dict] = field(default_factory=list)  # work made outside the portal's too
    objects: dict[str, dict[str, dict]] = field(default_factory=dict)  # kind -> name -> object
    taken_at: datetime | None = None  # when its lists began
    # Built on first use, once per reading: looked up per workload, a namespace of N workloads
    # costs N, where a scan and a sort of the namespace per workload cost N² (issue 55).
    _places: dict | None = field(default=None, repr=False, compare=False)
    _by_job_uid: dict | None = field(default=None, repr=False, compare=False)
    _observed: list | None = field(default=None, repr=False, compare=False)

    def object(
        self, kube: KubeGateway, kind: str, name: str, namespace: str, made: datetime | None = None
    ) -> dict | None:
        """The object of that kind and name: from the reading where it listed the kind and
        holds the object (its watch brought it, if it was made since), or lacks one made before
        the reading began (None: it does not exist; `made`: when, by the workload's row; None:
        not known, the reading is believed); else one GET (a younger one's event may be still
        on its way)."""
        if kind in self.objects:
            held = self.objects[kind].get(name)
            if held is not None or made is None or self.vouches_for(made):
                return held
        return kube.get(kind, name, namespace)

    def vouches_for(self, made: datetime) -> bool:
        """Whether an object made then was on the cluster before this reading began, so that
        what the reading lacks of it is gone, not yet to come."""
        return self.taken_at is None or made < self.taken_at - CLOCK_MARGIN

    def queue_workloads_for(self, workload: Workload) -> list[dict]:
        """`queue_workloads_of` the reading's Kueue Workloads, from an index by job uid."""
        if workload.kind != Workload.Kind.JOB:
            return self.queue_workloads or []
        if self._by_job_uid is None:
            grouped: dict[str | None, list[dict]] = defaultdict(list)
            for w in self.queue_workloads or []:
                grouped[(w["metadata"].get("labels") or {}).get(KUEUE_JOB_UID_LABEL)].append(w)
            self._by_job_uid = {uid: newest_first(ws) for uid, ws in grouped.items()}
        return self._by_job_uid.get(workload.k8s_uid, [])

    def place(self, queue_workload: dict) -> int | None:
        """`queue_position` among the reading's Kueue Workloads (one sort per reading)."""
        if self._places is None:
            self._places = queue_places(self.queue_workloads or [])
        return self._places.get((queue_workload.get("metadata") or {}).get("name"))

    def observed_events(self) -> list[dict]:
        """The events `observe` reads (EVENT_REASONS), picked out once per reading."""
        if self._observed is None:
            self._observed = [e for e in self.events if e.get("reason") in EVENT_REASONS]
        return self._observed

    def apply(self, kind: str, events: Iterable[dict]) -> None:
        """Bring the reading up to date with a watch's later events of a kind it holds (the
        sync's watches read each of them whole), so that a run reads a namespace once however
        many of its batches touch it. An event older than the object the reading holds (one
        that arrived while the namespace was being listed) is left out."""
        if kind == "KueueWorkload" and self.queue_workloads is not None:
            held = {w["metadata"]["name"]: w for w in self.queue_workloads}
            if _merge(held, events):
                self.queue_workloads, self._places, self._by_job_uid = (
                    list(held.values()),
                    None,
                    None,
                )
        elif kind == "Event":
            held = {e["metadata"]["name"]: e for e in self.events}
            observed = [e for e in events if e["object"].get("reason") in EVENT_REASONS]
            if _merge(held, observed):
                self.events, self._observed = list(held.values()), None
        elif kind in self.objects and _merge(self.objects[kind], events) and kind == "Pod":
            self.all_pods = list(self.objects["Pod"].values())
            self.pods = _by_workload(self.all_pods)


def apply_changes(
    readings: Mapping[str, NamespaceReading], changes: Mapping[str, list[dict]]
) -> None:
    """`NamespaceReading.apply` each kind's events to the readings of their namespaces."""
    for kind, events in changes.items():
        by_namespace: dict[str, list[dict]] = defaultdict(list)
        for event in events:
            namespace = (event["object"].get("metadata") or {}).get("namespace", "")
            if namespace in readings:
                by_namespace[namespace].append(event)
        for namespace, mine in by_namespace.items():
            readings[namespace].apply(kind, mine)


def _merge(held: dict[str, dict], events: Iterable[dict]) -> bool:
    """Apply watch events to objects by name; whether any changed."""
    changed = False
    for event in events:
        obj = event["object"]
        meta = obj.get("metadata") or {}
        old = held.get(meta.get("name", ""))
        if old is not None and not _newer(meta, old.get("metadata") or {}):
            continue
        if event.get("type") != "DELETED":
            held[meta.get("name", "")] = obj
        elif old is not None and (old.get("metadata") or {}).get("uid") == meta.get("uid"):
            del held[meta["name"]]
        else:
            continue
        changed = True
    return changed


def _newer(meta: Mapping, than: Mapping) -> bool:
    """Whether an object's resourceVersion is later than another's: the API server's are etcd
    revisions, integers that grow; one that is not (another server) is taken as newer."""
    new, old = meta.get("resourceVersion", ""), than.get("resourceVersion", "")
    return not (new.isdigit() and old.isdigit()) or int(new) > int(old)


def _by_workload(pods: Iterable[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for pod in pods:
        label = (pod["metadata"].get("labels") or {}).get(WORKLOAD_LABEL)
        if label is not None:
            grouped[label].append(pod)
    return {k: newest_first(v) for k, v in grouped.items()}


def read_namespace(kube: KubeGateway, namespace: str) -> NamespaceReading:
    """A namespace's reading in five lists (pods, events, Kueue's Workloads, Jobs and
    Deployments), so that no workload of it needs a GET while the reading is kept."""
    taken_at = timezone.now()
    everything = kube.list("Pod", namespace)
    return NamespaceReading(
        pods=_by_workload(everything),
        events=[e for e in kube.list("Event", namespace) if e.get("reason") in EVENT_REASONS],
        queue_workloads=list_queue_workloads(kube, namespace),
        all_pods=everything,
        objects={
            "Pod": {p["metadata"]["name"]: p for p in everything},
            **{
                kind: {o["metadata"]["name"]: o for o in kube.list(kind, namespace)}
                for kind in HELD_KINDS
            },
        },
        taken_at=taken_at,
    )


def reads_wide(namespaces: int, live_namespaces: int, wide_from: int) -> bool:
    """Whether a run that reads `namespaces` of the `live_namespaces` holding live work reads
    cluster-wide: a few lists whatever the number of namespaces, against five a namespace, but
    they carry every namespace's objects."""
    return namespaces >= max(1, wide_from) and namespaces >= WIDE_FROM_SHARE * live_namespaces


def read_wide(
    kube: KubeGateway, namespaces: Iterable[str], queue_workloads: list[dict] | None = None
) -> dict[str, NamespaceReading]:
    """Every namespace's reading from cluster-wide lists, made at once: pods, the events
    `observe` reads (one list per reason: the events API selects a field by equality only),
    Kueue's Workloads (`queue_workloads` where the caller listed them already), and Jobs and
    Deployments whole. A reading for each of `namespaces` and for every namespace that has
    Kueue Workloads, empty where the cluster holds nothing of it."""
    lists = [
        ("Pod", ""),
        *(("Event", f"reason={reason}") for reason in sorted(EVENT_REASONS)),
        *((kind, "") for kind in HELD_KINDS),
    ]
    taken_at = timezone.now()
    with ThreadPoolExecutor(len(lists) + 1) as pool:  # their wall time is the longest one's
        queued = pool.submit(list_queue_workloads, kube) if queue_workloads is None else None
        listed = list(pool.map(lambda q: (q[0], kube.list(q[0], field_selector=q[1])), lists))
        if queued is not None:
            queue_workloads = queued.result()
    in_namespace: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for what, items in [*listed, ("KueueWorkload", queue_workloads or [])]:
        for item in items:
            in_namespace[(item.get("metadata") or {}).get("namespace", "")][what].append(item)
    wanted = set(namespaces) | {
        (w.get("metadata") or {}).get("namespace", "") for w in queue_workloads or []
    }
    readings = {}
    for namespace in wanted:
        read = in_namespace.get(namespace, {})
        readings[namespace] = NamespaceReading(
            pods=_by_workload(read.get("Pod", [])),
            events=read.get("Event", []),
            queue_workloads=None if queue_workloads is None else read.get("KueueWorkload", []),
            all_pods=read.get("Pod", []),
            objects={
                kind: {o["metadata"]["name"]: o for o in read.get(kind, [])}
                for kind in ("Pod", *HELD_KINDS)
            },
            taken_at=taken_at,
        )
    return readings


def read_for(
    kube: KubeGateway,
    namespaces: set[str],
    live_namespaces: int,
    queue_workloads: list[dict] | None = None,
) -> dict[str, NamespaceReading]:
    """Cluster-wide readings for a run that reads these namespaces, where `reads_wide`; else
    none, and each namespace is read when first needed. A wide reading that fails leaves the
    run to read namespace by namespace (what fails there is retried by the next run)."""
    if not reads_wide(len(namespaces), live_namespaces, settings.SYNC_WORKLOADS_WIDE_FROM):
        return {}
    try:
        return read_wide(kube, namespaces, queue_workloads)
    except ClusterError as exc:
        log.warning("cannot read the cluster whole, reading namespace by namespace: %s", exc)
        return {}


class KeptReadings:
    """The readings a worker's last sync run ended with, and the watch cursors they are up to
    date with: the next run of the same worker that starts from those very cursors takes them
    on (its watches bring what changed since), where every run used to start with none and read
    again each namespace it touched (issue 55: 416 namespace readings in 37 runs at 200 teams).
    Cursors that differ (another worker ran in between, a full resync, a run that failed before
    it kept them) leave it none. Taken, not shared: one run at a time holds them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cursors: dict[str, str | None] | None = None
        self._readings: dict[str, NamespaceReading] = {}

    def take(self, cursors: Mapping[str, str | None]) -> dict[str, NamespaceReading]:
        with self._lock:
            mine, readings = self._cursors == dict(cursors), self._readings
            self._cursors, self._readings = None, {}
        return readings if mine else {}

    def keep(
        self, cursors: Mapping[str, str | None], readings: dict[str, NamespaceReading]
    ) -> None:
        with self._lock:
            self._cursors, self._readings = dict(cursors), readings


KEPT = KeptReadings()  # this process's (each Celery worker process keeps its own)
