"""Plays NVIDIA's MIG manager and device plugin for the fake GPU nodes.

Watches Nodes labelled nvidia.com/gpu.product (GPU feature discovery's label, from which the
catalog tells the node's model, as on a real cluster). When a node's nvidia.com/mig.config (or
nvidia.com/device-plugin.config) label differs from the value last processed (annotation
gpu-portal.local/...observed), it sets the state label to `pending`, waits a moment (the real
MIG manager drains and reconfigures), then either
  - rewrites the node's capacity/allocatable (status subresource) and GFD labels and sets the
    state to `success`, or
  - sets the state to `failed`, records a Warning Event on the node and changes nothing else
    (a layout that cannot be packed, an unknown config, MPS on MIG devices, ...).
State is kept in node annotations, so a restarted simulator does not redo finished work.

Run by `python -m localcluster up`; by hand: python -m localcluster.simulator --kubeconfig F
"""

from __future__ import annotations

import argparse
import logging
import queue
import threading
import time
import uuid
from datetime import UTC, datetime

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from . import gpu_layout as gl
from .fleet import ANN_DP_EFFECTIVE, ANN_DP_OBSERVED, ANN_MIG_EFFECTIVE, ANN_MIG_OBSERVED

log = logging.getLogger("gpu-simulator")
SELECTOR = gl.LABEL_PRODUCT  # every GPU node carries GFD's product label
COMPONENT = "gpu-portal-localcluster-simulator"
PUBLISHED_LABEL = "gpu-portal/config"  # ConfigMaps with mig-parted or device-plugin configs


def _wanted(labels: dict, ann: dict) -> tuple[bool, bool]:
    """(MIG change requested, device-plugin change requested). A removed label asks nothing."""
    mig, dp = labels.get(gl.LABEL_MIG_CONFIG), labels.get(gl.LABEL_DP_CONFIG)
    return (
        bool(mig) and mig != ann.get(ANN_MIG_OBSERVED),
        bool(dp) and dp != ann.get(ANN_DP_OBSERVED),
    )


class Simulator:
    def __init__(self, api: client.ApiClient, delay: float = 0.5, workers: int = 4):
        self.core = client.CoreV1Api(api)
        self.delay = delay
        self.queue: queue.Queue[str] = queue.Queue()
        self.lock = threading.Lock()
        self.queued: set[str] = set()  # waiting in the queue
        self.active: set[str] = set()  # being processed now
        self.again: set[str] = set()  # changed again while being processed
        for i in range(workers):
            threading.Thread(target=self._worker, name=f"worker-{i}", daemon=True).start()

    # --- queueing: one worker per node at a time, no duplicates ------------------------------

    def enqueue(self, name: str) -> None:
        with self.lock:
            if name in self.active:
                self.again.add(name)
            elif name not in self.queued:
                self.queued.add(name)
                self.queue.put(name)

    def _worker(self) -> None:
        while True:
            name = self.queue.get()
            with self.lock:
                self.queued.discard(name)
                self.active.add(name)
            try:
                self.reconcile(name)
            except Exception:  # keep the worker alive whatever one node does
                log.exception("reconciling node %s failed", name)
            finally:
                with self.lock:
                    self.active.discard(name)
                    redo = name in self.again
                    self.again.discard(name)
                if redo:
                    self.enqueue(name)

    # --- the MIG manager / device plugin ------------------------------------------------------

    def reconcile(self, name: str) -> None:
        node = self._read(name)
        if node is None:
            return
        labels, ann = node.metadata.labels or {}, node.metadata.annotations or {}
        mig_changed, dp_changed = _wanted(labels, ann)
        if not (mig_changed or dp_changed):
            return
        before = {k: labels.get(k) for k in (gl.LABEL_MIG_STATE, gl.LABEL_DP_STATE)}
        pending = {}
        if mig_changed:
            pending[gl.LABEL_MIG_STATE] = "pending"
        if dp_changed:
            pending[gl.LABEL_DP_STATE] = "pending"
        self.core.patch_node(name, {"metadata": {"labels": pending}})
        log.info(
            "%s: pending (mig.config=%s, device-plugin.config=%s)",
            name,
            labels.get(gl.LABEL_MIG_CONFIG),
            labels.get(gl.LABEL_DP_CONFIG),
        )
        time.sleep(self.delay)

        self._load_published_configs()
        node = self._read(name)  # the labels may have moved on while we waited
        if node is None:
            return
        labels, ann = node.metadata.labels or {}, node.metadata.annotations or {}
        mig_changed, dp_changed = _wanted(labels, ann)
        model, count = gl.model_of(labels), int(labels.get("nvidia.com/gpu.count", "0"))
        eff_mig = ann.get(ANN_MIG_EFFECTIVE) or None
        eff_dp = ann.get(ANN_DP_EFFECTIVE) or None
        new_labels: dict[str, str | None] = {}
        new_ann: dict[str, str] = {}
        events: list[tuple[str, str, str]] = []  # recorded once the node is written
        applied = False
        # A label set back to the processed value while we waited: undo our `pending`.
        for key, changed in ((gl.LABEL_MIG_STATE, mig_changed), (gl.LABEL_DP_STATE, dp_changed)):
            if key in pending and not changed:
                new_labels[key] = before[key]
        if mig_changed:
            want = labels[gl.LABEL_MIG_CONFIG]
            new_ann[ANN_MIG_OBSERVED] = want
            error = self._try(model, count, want, eff_dp)
            if error:
                new_labels[gl.LABEL_MIG_STATE] = "failed"
                events.append(("MigConfigFailed", f"mig.config={want}: {error}", "Warning"))
            else:
                eff_mig, applied = want, True
                new_labels[gl.LABEL_MIG_STATE] = "success"
                new_ann[ANN_MIG_EFFECTIVE] = want
                events.append(("MigConfigApplied", f"mig.config={want} applied", "Normal"))
        if dp_changed:
            want = labels[gl.LABEL_DP_CONFIG]
            new_ann[ANN_DP_OBSERVED] = want
            error = self._try(model, count, eff_mig, want)
            if error:
                new_labels[gl.LABEL_DP_STATE] = "failed"
                events.append(
                    ("DevicePluginConfigFailed", f"device-plugin.config={want}: {error}", "Warning")
                )
            else:
                eff_dp, applied = want, True
                new_labels[gl.LABEL_DP_STATE] = "success"
                new_ann[ANN_DP_EFFECTIVE] = want
                events.append(
                    ("DevicePluginConfigApplied", f"device-plugin.config={want} applied", "Normal")
                )
        if applied and model:  # applied: _try found the model
            resources, gfd = gl.node_gpu_state(model, count, eff_mig, eff_dp)
            self._write_status(node, resources)
            # The config labels are the portal's requests: never overwrite them.
            gfd.pop(gl.LABEL_MIG_CONFIG, None)
            gfd.pop(gl.LABEL_DP_CONFIG, None)
            stale = gl.stale_mig_labels(labels, gfd)
            new_labels = {**gfd, **dict.fromkeys(stale), **new_labels}
        # Labels last: whoever sees `success` finds the new allocatable already in place.
        self.core.patch_node(name, {"metadata": {"labels": new_labels, "annotations": new_ann}})
        for reason, message, kind in events:
            self._event(node, reason, message, kind)
        log.info(
            "%s: mig=%s dp=%s -> %s",
            name,
            eff_mig,
            eff_dp,
            {k: v for k, v in new_labels.items() if k.endswith(".state")},
        )

    def _load_published_configs(self) -> None:
        """Read the configs the portal published (ConfigMaps labelled gpu-portal/config)."""
        try:
            maps = self.core.list_config_map_for_all_namespaces(label_selector=PUBLISHED_LABEL)
        except ApiException as exc:  # keep the files' configs; the change may still be valid
            log.warning("cannot read published configs: %s %s", exc.status, exc.reason)
            return
        gl.use_published_configs(
            *gl.parse_published(
                [((m.metadata.labels or {})[PUBLISHED_LABEL], m.data or {}) for m in maps.items]
            )
        )

    @staticmethod
    def _try(model: str | None, count: int, mig: str | None, dp: str | None) -> str | None:
        if not model or count <= 0:
            return (
                "node has no nvidia.com/gpu.product of a GPU model the catalog knows, or no "
                "nvidia.com/gpu.count label"
            )
        try:
            gl.node_gpu_state(model, count, mig, dp)
        except (gl.LayoutError, KeyError) as exc:
            return str(exc)
        return None

    def _write_status(self, node: client.V1Node, resources: dict[str, int]) -> None:
        patch: dict[str, dict[str, str]] = {"capacity": {}, "allocatable": {}}
        for field in ("capacity", "allocatable"):
            current = getattr(node.status, field) or {}
            # Like the kubelet: a resource whose devices vanished stays listed with 0.
            for key in current:
                if key.startswith("nvidia.com/") and key not in resources:
                    patch[field][key] = "0"
            for key, value in resources.items():
                patch[field][key] = str(value)
        self.core.patch_node_status(node.metadata.name, {"status": patch})

    def _event(self, node: client.V1Node, reason: str, message: str, kind: str) -> None:
        now = datetime.now(UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"{node.metadata.name}.{uuid.uuid4().hex[:12]}"),
            involved_object=client.V1ObjectReference(
                kind="Node", name=node.metadata.name, uid=node.metadata.uid, api_version="v1"
            ),
            reason=reason,
            message=message,
            type=kind,
            count=1,
            first_timestamp=now,
            last_timestamp=now,
            source=client.V1EventSource(component=COMPONENT, host=node.metadata.name),
        )
        try:
            self.core.create_namespaced_event("default", event)
        except ApiException as exc:  # events are a courtesy; never fail the work for them
            log.warning("cannot record event %s on %s: %s", reason, node.metadata.name, exc.reason)

    def _read(self, name: str) -> client.V1Node | None:
        try:
            return self.core.read_node(name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    # --- watch loop ---------------------------------------------------------------------------

    def run_forever(self) -> None:
        while True:
            try:
                listing = self.core.list_node(label_selector=SELECTOR)
                for node in listing.items:
                    if any(_wanted(node.metadata.labels or {}, node.metadata.annotations or {})):
                        self.enqueue(node.metadata.name)
                rv = listing.metadata.resource_version
                w = watch.Watch()
                for ev in w.stream(
                    self.core.list_node,
                    label_selector=SELECTOR,
                    resource_version=rv,
                    timeout_seconds=300,
                ):
                    node = ev["object"]
                    if ev["type"] in ("ADDED", "MODIFIED") and any(
                        _wanted(node.metadata.labels or {}, node.metadata.annotations or {})
                    ):
                        self.enqueue(node.metadata.name)
            except ApiException as exc:
                if exc.status != 410:  # 410 Gone: resourceVersion too old, just relist
                    log.warning("watch failed: %s %s; retrying", exc.status, exc.reason)
                    time.sleep(1)
            except Exception as exc:  # API server restarting: keep trying
                log.warning("watch interrupted: %s; retrying", exc)
                time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument(
        "--delay",
        type=float,
        default=0.5,
        help="seconds a node stays pending before the change applies",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    api = config.new_client_from_config(config_file=args.kubeconfig)
    log.info("watching GPU nodes (selector %s)", SELECTOR)
    Simulator(api, delay=args.delay).run_forever()


if __name__ == "__main__":
    main()
