"""Several watches read at once and handed over in batches as their events arrive, so that the
sync acts on a change within a moment of it rather than when the watches end (which made the
lag pod → page up to the whole watch time plus the whole run's work: issue 55).

A batch is whatever arrived while the last one was being synced, so it grows with the rate of
change and the sync never falls behind by more than one batch's work."""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import cast

from scheduler.cluster.kube import KubeGateway, ResourceVersionGone

_END = object()  # a watch ended as the server closed it
# A run's watches are opened again while it is behind, up to this many windows in all: a run
# of a busy fleet still ends, saves its cursors and stops what outran its run time.
LONGEST_WINDOWS = 3


@dataclass(frozen=True)
class Watched:
    """A collection the periodic sync follows with a watch cursor."""

    kind: str
    label_selector: str = ""
    field_selector: str = ""


@dataclass
class Batch:
    """What arrived together: ADDED / MODIFIED / DELETED events by kind, in order, and each
    collection's cursor after them (bookmarks move it too, and are not events)."""

    events: dict[str, list[dict]]
    cursors: dict[str, str]


def change_batches(
    kube: KubeGateway,
    cursors: Mapping[str, str | None],
    watched: Iterable[Watched],
    *,
    timeout_s: int,
    gather_s: float,
) -> Iterator[Batch]:
    """Watch every collection that has a cursor from it, each in a thread for `timeout_s`;
    yield a batch as soon as something arrives (waiting `gather_s` more for what comes with
    it), and one whenever only cursors moved, until every watch has ended (a watch that ends
    while the caller is behind is opened again from its last cursor, `behind`). A 410 is raised at
    once (the caller lists again; the other watches end by themselves); any other error of a
    watch is raised after the others end, so the batches before it count and the cursors of the
    other collections move on."""
    todo = [w for w in watched if cursors.get(w.kind)]
    inbox: queue.Queue[tuple[str, object]] = queue.Queue()
    held: list[float | None] = [None]  # since when the caller holds a batch, while it does
    until = time.monotonic() + LONGEST_WINDOWS * timeout_s

    def behind() -> bool:
        """The caller has been syncing one batch for longer than a batch gathers: a watch that
        ends now is opened again, so what comes next is in this run's next batch, not after
        the rest of it and the next run's start (a burst: issue 55). Not for a batch that
        touches nothing of the portal's, synced in a moment (another tenant's changes on a
        shared cluster); up to LONGEST_WINDOWS windows in all."""
        now, since = time.monotonic(), held[0]  # one read: the reader's thread resets it
        return since is not None and now - since >= gather_s and now < until

    def pump(w: Watched) -> None:
        since, window = str(cursors[w.kind]), timeout_s
        try:
            while True:
                opened = time.monotonic()
                for event in kube.stream(
                    w.kind, since, label_selector=w.label_selector,
                    field_selector=w.field_selector, timeout_s=window,
                ):  # fmt: skip
                    since = (event["object"].get("metadata") or {}).get("resourceVersion") or since
                    inbox.put((w.kind, event))
                # one closed within a second did not last its window (the server went away):
                # the next run opens it again, not this one at once
                if not behind() or time.monotonic() - opened < 1:
                    break
                # at least 3 s: the API server bookmarks a quiet watch 2 s before its end
                window = max(3, min(timeout_s, int(until - time.monotonic())))
        except Exception as exc:  # noqa: BLE001 (handed to the reader, raised there)
            inbox.put((w.kind, exc))
        else:
            inbox.put((w.kind, _END))

    for w in todo:
        threading.Thread(target=pump, args=(w,), name=f"watch-{w.kind}", daemon=True).start()
    latest = {w.kind: str(cursors[w.kind]) for w in todo}
    open_, failure = len(todo), None
    while open_:
        arrived = _gather(inbox, gather_s, open_)
        events: dict[str, list[dict]] = defaultdict(list)
        moved = False
        for kind, item in arrived:
            if _is_end(item):
                open_ -= 1
                if isinstance(item, ResourceVersionGone):
                    raise item
                failure = failure or (item if isinstance(item, Exception) else None)
                continue
            event = cast(dict, item)
            rv = (event["object"].get("metadata") or {}).get("resourceVersion")
            if rv and rv != latest[kind]:
                latest[kind], moved = rv, True
            if event.get("type") != "BOOKMARK":
                events[kind].append(event)
        if events or moved:
            held[0] = time.monotonic()
            try:
                yield Batch(events=dict(events), cursors=dict(latest))
            finally:
                held[0] = None
    if failure is not None:
        raise failure


def _gather(
    inbox: queue.Queue[tuple[str, object]], gather_s: float, open_: int
) -> list[tuple[str, object]]:
    """What is in the inbox: waits for the first item, then `gather_s` for more, unless every
    one of the `open_` watches ends first (nothing more will come)."""
    arrived = [inbox.get()]
    ends = int(_is_end(arrived[0][1]))
    until = time.monotonic() + gather_s
    while ends < open_ and (left := until - time.monotonic()) > 0:
        try:
            arrived.append(inbox.get(timeout=left))
        except queue.Empty:
            break
        ends += _is_end(arrived[-1][1])
    while True:  # a burst bigger than the wait: all of it in one batch
        try:
            arrived.append(inbox.get_nowait())
        except queue.Empty:
            return arrived


def _is_end(item: object) -> bool:
    return item is _END or isinstance(item, Exception)
