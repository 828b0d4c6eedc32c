"""What the scale bench sees happen on the cluster, read from watches opened before anything is
submitted: when each Job's Kueue Workload was first admitted, and when each portal workload's
pod first ran. A poll of the whole list of Workloads (seconds each at thousands) missed the
5-second Jobs that were admitted, ran and were deleted between two polls, and the run then
waited out its timeout for them; a watch is told of every change, deletions included.

The recorders are pure (events in, times out) and tested without a cluster."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection

from django.db import connection

from core.errors import ClusterError
from scheduler.cluster.kube import KubeGateway, ResourceVersionGone
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.models import Workload

WATCH_S = 5  # each watch's length: how long a stop waits at most
Key = tuple[str, str]  # (namespace, name)


def _true(obj: dict, condition: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == condition and c.get("status") == "True" for c in conditions)


class Admissions:
    """When each Job's Kueue Workload (by the Job's namespace and name) was first seen admitted,
    and the Jobs whose Workload finished or went without being seen admitted (so that nobody
    waits for them)."""

    def __init__(self) -> None:
        self.at: dict[Key, float] = {}
        self.gone: set[Key] = set()

    def __call__(self, event: dict, now: float) -> None:
        obj = event["object"]
        meta = obj.get("metadata") or {}
        refs = meta.get("ownerReferences") or []
        if not refs or "namespace" not in meta:
            return
        key = (meta["namespace"], refs[0].get("name", ""))
        if key in self.at:
            return
        if _true(obj, "Admitted"):
            self.at[key] = now
        elif event["type"] == "DELETED" or _true(obj, "Finished"):
            self.gone.add(key)

    def settled(self, keys: Collection[Key]) -> int:
        return sum(1 for k in keys if k in self.at or k in self.gone)

    def times(self, keys: Collection[Key]) -> list[float]:
        at = dict(self.at)  # the watch's thread goes on adding
        return sorted(at[k] for k in keys if k in at)

    def wait(self, keys: Collection[Key], timeout_s: float, stall_s: float) -> list[float]:
        """Until every one is admitted or gone, or nothing more settles for `stall_s` (a stuck
        run says how many it saw, rather than waiting its whole timeout)."""
        deadline = time.monotonic() + timeout_s
        settled, moved = -1, time.monotonic()
        while time.monotonic() < deadline:
            now_settled = self.settled(keys)
            if now_settled == len(keys):
                break
            if now_settled != settled:
                settled, moved = now_settled, time.monotonic()
            elif time.monotonic() - moved > stall_s:
                print(f"  admissions stalled at {settled}/{len(keys)}", flush=True)
                break
            time.sleep(0.5)
        return self.times(keys)


class PodStarts:
    """When each portal workload's pod (by its workload label) was first seen started: running,
    or already past it when first seen."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}

    def __call__(self, event: dict, now: float) -> None:
        obj = event["object"]
        label = ((obj.get("metadata") or {}).get("labels") or {}).get(WORKLOAD_LABEL)
        status = obj.get("status") or {}
        started = status.get("phase") == "Running" or (
            status.get("phase") in ("Succeeded", "Failed") and status.get("containerStatuses")
        )
        if label and label.isdigit() and started:
            self.at.setdefault(int(label), now)


class RowStarts(threading.Thread):
    """When each workload whose pod was seen started first has its row say so (`started_at`,
    what the pages show), polled for those pods only: a handful of ids per poll, not all."""

    def __init__(self, pods: PodStarts, every_s: float = 0.25) -> None:
        super().__init__(daemon=True, name="row-starts")
        self.pods, self.every_s = pods, every_s
        self.at: dict[int, float] = {}
        self.stop = threading.Event()

    def pending(self) -> list[int]:
        return [w for w in list(self.pods.at) if w not in self.at]

    def run(self) -> None:
        try:
            while not self.stop.wait(self.every_s):
                if pending := self.pending():
                    rows = Workload.objects.filter(pk__in=pending, started_at__isnull=False)
                    now = time.monotonic()
                    for pk in rows.values_list("pk", flat=True):
                        self.at.setdefault(pk, now)
        finally:
            connection.close()  # this thread's own: else the bench's database cannot be dropped

    def close(self, catch_up_s: float = 0) -> None:
        """Let the rows of pods already seen catch up (bounded), then stop."""
        deadline = time.monotonic() + catch_up_s
        while self.pending() and time.monotonic() < deadline:
            time.sleep(self.every_s)
        self.stop.set()
        self.join()


def lags(pod_at: dict[int, float], row_at: dict[int, float]) -> list[float]:
    """Seconds from each pod seen started to its row saying so (those with both)."""
    return [row_at[w] - pod_at[w] for w in row_at if w in pod_at]


def slowest(
    pod_at: dict[int, float],
    row_at: dict[int, float],
    runs: list[tuple[float, float]],
    since: float,
    n: int = 5,
) -> list[str]:
    """The `n` longest lags, each with when its pod started and the sync runs (start-end) from
    then to its row, in seconds from `since` (pure): where in the runs the tail lies."""
    worst = sorted((w for w in row_at if w in pod_at), key=lambda w: pod_at[w] - row_at[w])[:n]
    out = []
    for w in worst:
        seen, shown = pod_at[w], row_at[w]
        spans = [f"{a - since:.1f}-{b - since:.1f}" for a, b in runs if b >= seen and a <= shown]
        out.append(
            f"  {shown - seen:.2f} s: pod started at {seen - since:.1f} s,"
            f" row at {shown - since:.1f} s; sync runs {', '.join(spans) or 'none'}"
        )
    return out


class Watch(threading.Thread):
    """One collection watched from now on, each event handed to `record` with when it came.
    The cursor is taken here, in the caller's thread, so nothing submitted after the
    constructor returns can be missed."""

    def __init__(
        self,
        kube: KubeGateway,
        kind: str,
        record: Callable[[dict, float], None],
        label_selector: str = "",
    ) -> None:
        super().__init__(daemon=True, name=f"watch-{kind}")
        self.kube, self.kind, self.record, self.selector = kube, kind, record, label_selector
        _, self.rv = kube.list_versioned(kind, label_selector=label_selector, limit=1)
        self.stop = threading.Event()
        self.errors, self.relist, self.relists = 0, False, 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                if self.relist:  # history compacted: what is there now, then on from it
                    items, self.rv = self.kube.list_versioned(
                        self.kind, label_selector=self.selector
                    )
                    now, self.relist = time.monotonic(), False
                    for item in items:
                        self.record({"type": "ADDED", "object": item}, now)
                self._once()
            except ResourceVersionGone:
                self.relist, self.relists = True, self.relists + 1
            except ClusterError:
                self.errors += 1
                self.stop.wait(1)

    def _once(self) -> None:
        for event in self.kube.stream(
            self.kind, self.rv, label_selector=self.selector, timeout_s=WATCH_S
        ):
            self.rv = (event["object"].get("metadata") or {}).get("resourceVersion") or self.rv
            if event["type"] != "BOOKMARK":
                self.record(event, time.monotonic())

    def close(self) -> None:
        self.stop.set()
        self.join(timeout=WATCH_S + 40)
