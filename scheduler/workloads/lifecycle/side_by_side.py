"""Syncing many workloads at once (`sync.py` syncs one): each namespace read once, then the
workloads side by side. A workload's sync is mostly waiting, on PostgreSQL (a state change is a
row lock, the row, its event and its audit record) and now and then on the API server, so a
batch's syncs on a few threads, each with its own database connection, take a fraction of
their time one after another (issue 55: 2,422 state changes at 24 ms each made the lag pod →
page at 200 teams)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from django.conf import settings
from django.db import connection

from core.errors import ClusterError
from scheduler.cluster.kube import KubeGateway
from scheduler.workloads.lifecycle.reading import NamespaceReading, read_for, read_namespace
from scheduler.workloads.lifecycle.sync import sync_workload
from scheduler.workloads.models import Workload

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


# Items a thread must have for a batch to be spread: each thread opens a connection of its own
# (about 13 ms on an idle machine here, fork and authentication), worth it for a burst of state
# changes (24 ms each at 200 teams), not for the few no-op syncs of a usual batch.
PER_THREAD = 8


def each(work: Callable[[T], R], items: Sequence[T], threads: int) -> list[R]:
    """`work` of every item, on `threads` threads where each gets at least PER_THREAD items
    (fewer threads where there are fewer), else on this one. A caller inside a transaction gets
    this thread only: rows it wrote and has not committed are not there for another
    connection. An exception of `work` is raised here once every thread has stopped."""
    threads = min(threads, len(items) // PER_THREAD)
    if threads <= 1 or connection.in_atomic_block:
        return [work(item) for item in items]

    def part(share: Sequence[T]) -> list[R]:
        try:
            return [work(item) for item in share]
        finally:
            connection.close()  # this thread's own, opened by `work`

    with ThreadPoolExecutor(threads, thread_name_prefix="sync") as pool:
        parts = list(pool.map(part, [items[i::threads] for i in range(threads)]))
    return [result for share in parts for result in share]


def sync_each(
    kube: KubeGateway,
    workloads: Iterable[tuple[int, str]],
    readings: dict[str, NamespaceReading] | None = None,
    ended: Mapping[str, list[dict]] | None = None,
    *,
    defer_gone: bool = False,
) -> tuple[dict[str, NamespaceReading], list[int]]:
    """Sync (workload id, namespace) pairs, from `readings` where given (`reading.read_for`),
    else reading each namespace once first, and then side by side (SYNC_WORKLOADS_THREADS);
    returns the readings and the ids whose sync failed on a cluster error (logged)."""
    readings = dict(readings or {})
    pairs = list(workloads)
    rows = Workload.objects.select_related("tenant").in_bulk([pk for pk, _ in pairs])
    unread = set()
    for namespace in {namespace for _, namespace in pairs} - set(readings):
        try:
            readings[namespace] = read_namespace(kube, namespace)
        except ClusterError as exc:
            log.warning("namespace %s not read, its workloads not synced: %s", namespace, exc)
            unread.add(namespace)

    def one(pair: tuple[int, str]) -> int | None:  # its id, where its sync failed
        pk, namespace = pair
        if namespace in unread:
            return pk
        try:
            sync_workload(
                kube,
                pk,
                readings[namespace],
                row=rows[pk],
                ended=(ended or {}).get(namespace, ()),
                defer_gone=defer_gone,
            )
        except ClusterError as exc:
            log.warning("sync of workload %s failed: %s", pk, exc)
            return pk
        return None

    todo = [pair for pair in pairs if pair[0] in rows]  # else deleted since it was listed
    failed = each(one, todo, settings.SYNC_WORKLOADS_THREADS)
    return readings, [pk for pk in failed if pk is not None]


def sync_all_live_workloads(kube: KubeGateway) -> int:
    """The full, level-triggered sync: every workload that is not over yet, reading each
    namespace once (5 lists a namespace, no GET) or, with many namespaces, the
    cluster whole (`reading.read_for`); returns how many were looked at. The periodic sync
    falls back to it (first run, expired cursors, and every SYNC_WORKLOADS_FULL_EVERY_S), so
    whatever a watch missed is repaired."""
    return sync_all_live(kube)[0]


def sync_all_live(
    kube: KubeGateway,
    readings: dict[str, NamespaceReading] | None = None,
    *,
    defer_gone: bool = False,
) -> tuple[int, list[int], dict[str, NamespaceReading]]:
    """How many live workloads the full sync looked at, the ids whose sync failed (or was
    deferred: `defer_gone`) and the readings it synced them from; from `readings` where the
    caller read the cluster already."""
    live = list(Workload.objects.live().values_list("pk", "namespace"))
    if readings is None:
        namespaces = {namespace for _, namespace in live}
        readings = read_for(kube, namespaces, len(namespaces))
    read, failed = sync_each(kube, live, readings, defer_gone=defer_gone)
    return len(live), failed, read
