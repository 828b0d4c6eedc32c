"""The fake GPU nodes: Node manifests from fleet.yaml, created through the API server.

KWOK manages every node annotated kwok.x-k8s.io/node=fake: it fills in conditions, keeps the
node lease fresh and moves pods bound to it to Running. Capacity is set at creation (the API
server keeps status on create) and later rewritten by the simulator via the status subresource.
Every GPU node carries the fleet's GPU taints and its block and rack labels; `up` adds them to
nodes made before they existed (and drops labels the fleet no longer sets), leaving everything
else as it is.
"""

from __future__ import annotations

import os
import time
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from . import gpu_layout as gl

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# The simulator records which label values it has processed and which are in effect.
ANN_MIG_OBSERVED = "gpu-portal.local/mig.config.observed"
ANN_MIG_EFFECTIVE = "gpu-portal.local/mig.config.effective"
ANN_DP_OBSERVED = "gpu-portal.local/device-plugin.config.observed"
ANN_DP_EFFECTIVE = "gpu-portal.local/device-plugin.config.effective"
LABEL_BENCH = "gpu-portal.local/bench"


def gpu_taints() -> list[dict[str, str]]:
    """The taints of every GPU node (fleet.yaml `gpuTaints`)."""
    return [dict(t) for t in gl.fleet_spec().get("gpuTaints") or []]


def fleet_gpu_labels() -> dict[str, str]:
    """The labels of every GPU node (fleet.yaml `gpuLabels`)."""
    return {str(k): str(v) for k, v in (gl.fleet_spec().get("gpuLabels") or {}).items()}


def gpu_tolerations() -> list[dict[str, str]]:
    """Tolerations of the GPU taints, for pods the tests place on GPU nodes themselves."""
    return [{"key": t["key"], "operator": "Exists", "effect": t["effect"]} for t in gpu_taints()]


def topology_labels(spec: dict) -> dict[str, str]:
    """A node's block and rack as node labels (fleet.yaml `topologyLabels` name the keys)."""
    keys = gl.fleet_spec().get("topologyLabels") or {}
    place = spec.get("topology") or {}
    return {keys[level]: str(value) for level, value in place.items() if level in keys}


FLEET_NODES_ENV = "LOCALCLUSTER_FLEET_NODES"  # comma-separated seed names (a worker's few)


def seed_names(environ: dict[str, str] | None = None) -> set[str] | None:
    """The seed nodes to keep (`LOCALCLUSTER_FLEET_NODES`), None for all of them."""
    raw = (os.environ if environ is None else environ).get(FLEET_NODES_ENV, "")
    names = {name.strip() for name in raw.split(",") if name.strip()}
    return names or None


def node_templates(large: int = 0) -> list[dict]:
    """The seed nodes (those `LOCALCLUSTER_FLEET_NODES` names, when set), plus `large`
    generated ones cycling through them."""
    keep = seed_names()
    seed = [dict(n) for n in gl.fleet_spec()["nodes"] if keep is None or n["name"] in keep]
    if keep is not None and (unknown := keep - {n["name"] for n in seed}):
        known = sorted(n["name"] for n in gl.fleet_spec()["nodes"])
        raise ValueError(f"{FLEET_NODES_ENV}: {sorted(unknown)} not in fleet.yaml ({known})")
    extra = []
    for i in range(large):
        tmpl = dict(seed[i % len(seed)])
        tmpl["name"] = f"bench-{tmpl['model'].lower()}-{i:04d}"
        tmpl["bench"] = True
        extra.append(tmpl)
    return seed + extra


def node_manifest(spec: dict) -> dict[str, Any]:
    defaults = gl.fleet_spec().get("defaults", {})
    mig, dp = spec.get("migConfig"), spec.get("devicePluginConfig")
    gpu_res, gpu_labels = gl.node_gpu_state(spec["model"], int(spec["gpus"]), mig, dp)
    base = {
        k: str(spec.get(k, defaults[k])) for k in ("cpu", "memory", "pods", "ephemeral-storage")
    }
    resources = {**base, **{k: str(v) for k, v in gpu_res.items()}}
    labels = {
        "kubernetes.io/hostname": spec["name"],
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        **gpu_labels,
        **fleet_gpu_labels(),
        **topology_labels(spec),
        **(spec.get("labels") or {}),
    }
    if gl.LABEL_MIG_CONFIG in labels:
        labels[gl.LABEL_MIG_STATE] = "success"
    if gl.LABEL_DP_CONFIG in labels:
        labels[gl.LABEL_DP_STATE] = "success"
    if spec.get("bench"):
        labels[LABEL_BENCH] = "true"
    annotations = {
        KWOK_ANNOTATION: "fake",
        "node.alpha.kubernetes.io/ttl": "0",
        ANN_MIG_OBSERVED: mig or "",
        ANN_MIG_EFFECTIVE: mig or "",
        ANN_DP_OBSERVED: dp or "",
        ANN_DP_EFFECTIVE: dp or "",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec["name"], "labels": labels, "annotations": annotations},
        "spec": {"taints": gpu_taints()},
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


def _taint_key(taint: dict[str, Any]) -> tuple[str, str]:
    return taint.get("key") or "", taint.get("effect") or ""


def node_update(node: dict[str, Any], entry: dict | None = None) -> dict[str, Any] | None:
    """The patch that brings an existing fleet node up to date: the fleet's GPU taints and
    labels added (others, such as a cordon's, kept), its block and rack set (`entry`: its
    fleet.yaml entry), labels the fleet no longer sets removed; None when it is up to date.
    The GPU layout the simulator or a test applied is left alone (pure)."""
    spec, meta = node.get("spec") or {}, node.get("metadata") or {}
    taints = [dict(t) for t in spec.get("taints") or []]
    have = {_taint_key(t): t for t in taints}
    patch: dict[str, Any] = {}
    changed = False
    for wanted in gpu_taints():
        current = have.get(_taint_key(wanted))
        if current is None:
            taints.append(wanted)
            changed = True
        elif current.get("value", "") != wanted.get("value", ""):
            current["value"] = wanted.get("value", "")
            changed = True
    if changed:
        patch["spec"] = {"taints": taints}
    have_labels = meta.get("labels") or {}
    labels: dict[str, str | None] = {k: None for k in gl.OBSOLETE_LABELS if k in have_labels}
    for key, value in {**fleet_gpu_labels(), **topology_labels(entry or {})}.items():
        if have_labels.get(key) != value:
            labels[key] = value
    if labels:
        patch["metadata"] = {"labels": labels}
    return patch or None


def ensure_nodes(api: client.ApiClient, large: int | None = None) -> list[str]:
    """Create missing fleet nodes, bring existing ones up to date (`node_update`) and return
    all names. Running it again changes nothing.

    With `large` given, bench nodes beyond that count are deleted, so `--large 0` removes them.
    """
    core = client.CoreV1Api(api)
    existing = {n.metadata.name: n for n in core.list_node().items}
    specs = node_templates(large or 0)
    for spec in specs:
        node = existing.get(spec["name"])
        if node is None:
            try:
                core.create_node(node_manifest(spec))
            except ApiException as exc:
                if exc.status != 409:
                    raise
            continue
        patch = node_update(api.sanitize_for_serialization(node), spec)
        if patch:
            # a merge patch replaces the taint list whole: the list above keeps the others
            core.patch_node(spec["name"], patch)
    names = [s["name"] for s in specs]
    if large is not None:
        for node in core.list_node(label_selector=f"{LABEL_BENCH}=true").items:
            if node.metadata.name not in names:
                core.delete_node(node.metadata.name)
    return names


def _node_ready(node: client.V1Node) -> bool:
    conditions = node.status.conditions or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    # The node-lifecycle controller lifts this taint once it sees the node Ready; until then
    # the scheduler refuses the node.
    tainted = any(t.key == "node.kubernetes.io/not-ready" for t in node.spec.taints or [])
    return ready and not tainted


def wait_nodes_ready(api: client.ApiClient, names: list[str], timeout: float = 180) -> None:
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    pending = set(names)
    while True:
        nodes = {n.metadata.name: n for n in core.list_node().items}
        pending = {n for n in names if n not in nodes or not _node_ready(nodes[n])}
        if not pending:
            return
        if time.monotonic() > deadline:
            shown = ", ".join(sorted(pending)[:10])
            raise TimeoutError(
                f"{len(pending)} node(s) not Ready after {timeout:.0f} s: {shown}"
                " (see .local/cluster/logs/kwok.log, kube-controller-manager.log)"
            )
        time.sleep(0.5)
