"""The replay's watch on the pods (part 1, `replay/overtime.py`): a thread that follows every pod
of the portal's workloads in the replay's namespaces on the cluster, and stamps, on receipt with
the monotonic clock, when each was first seen Running and when and how it ended (succeeded,
failed, or preempted: stopped before its run was over), for `metrics.measure` to work from.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from kubernetes import client, watch

WORKLOAD_LABEL = "gpu-portal.io/workload"


@dataclass
class PodSeen:
    workload: int
    running: float | None = None
    ended: float | None = None
    outcome: str = ""  # succeeded | failed | preempted


class PodWatch(threading.Thread):
    """Every pod of the portal's workloads in namespaces starting with `prefix`: when it was
    first seen Running, and when and how it ended, stamped on receipt (monotonic seconds from
    `t0`), not from the API server's whole-second timestamps."""

    def __init__(self, api: client.ApiClient, prefix: str, t0: float):
        super().__init__(name="replay-pod-watch", daemon=True)
        self.core = client.CoreV1Api(api)
        self.prefix, self.t0 = prefix, t0
        self.pods: dict[str, PodSeen] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        listed = self.core.list_pod_for_all_namespaces(label_selector=WORKLOAD_LABEL, limit=1)
        self.resource_version = listed.metadata.resource_version

    def run(self) -> None:
        while not self.stopping.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(
                    self.core.list_pod_for_all_namespaces,
                    label_selector=WORKLOAD_LABEL,
                    resource_version=self.resource_version,
                    timeout_seconds=5,
                    allow_watch_bookmarks=True,
                ):
                    if event["type"] == "BOOKMARK":
                        self.resource_version = event["raw_object"]["metadata"]["resourceVersion"]
                    else:
                        self._seen(event["type"], event["object"])
                        self.resource_version = event["object"].metadata.resource_version
                    if self.stopping.is_set():
                        break
            finally:
                w.stop()

    def _seen(self, kind: str, pod: client.V1Pod) -> None:
        meta = pod.metadata
        if not meta.namespace.startswith(self.prefix):
            return
        now = time.monotonic() - self.t0
        with self.lock:
            seen = self.pods.setdefault(meta.uid, PodSeen(int(meta.labels[WORKLOAD_LABEL])))
            if seen.ended is not None:
                return
            phase = pod.status.phase if pod.status else None
            if phase == "Running" and seen.running is None:
                seen.running = now
            if phase in ("Succeeded", "Failed"):
                seen.running = seen.running if seen.running is not None else now
                seen.ended, seen.outcome = now, phase.lower()
            elif seen.running is not None and (kind == "DELETED" or meta.deletion_timestamp):
                seen.ended, seen.outcome = now, "preempted"  # stopped before its run was over

    def stop(self) -> dict[str, PodSeen]:
        self.stopping.set()
        self.join(timeout=15)
        with self.lock:
            return dict(self.pods)
