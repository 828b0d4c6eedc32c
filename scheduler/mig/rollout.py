"""Applying a plan: publish the configs, then relabel its nodes one at a time.

For each changed node: cordon it when pods run there (no new work lands on GPUs being
re-created), set `nvidia.com/mig.config` (and the device plugin's config label), wait for the
MIG manager's `nvidia.com/mig.config.state` to reach `success`, uncordon. On `failed` (or a
timeout) the rollout stops: the node stays cordoned, the plan says which node and why, and the
nodes after it are left alone. Every step writes an audit event; the inventory is synced at the
end so pools follow the new layouts.

A step runs under the plan's lease, a PostgreSQL advisory lock on its worker's own session: no
two workers apply a node of one plan at once, and a worker killed mid-step frees the lease the
moment its connection drops, so the periodic check (`is_stuck`) resumes the rollout within a
hand-over (`Plan.handover_s`) instead of waiting out the longest step a worker could take.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from core import audit
from core.locks import advisory_lock, advisory_lock_held_elsewhere
from core.permissions import require_platform_admin
from scheduler.cluster import inventory
from scheduler.cluster.kube import KubeGateway
from scheduler.mig import publishing
from scheduler.mig.models import Plan

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
DP_CONFIG_LABEL = "nvidia.com/device-plugin.config"
# NVIDIA's device plugin publishes no state; the local cluster's simulator does under this key.
DP_STATE_LABEL = "gpu-portal/device-plugin.config.state"
DONE_STATES = ("success", "failed")
ROLLOUT_LEASE = 0x6D69  # "mi": advisory-lock key space of MIG rollouts, keyed by plan id


def lease(plan_id: int):
    """The plan's lease on this worker's session (a context manager yielding whether it was
    got): held while a step runs, released at its end or when the worker dies."""
    return advisory_lock(ROLLOUT_LEASE, plan_id)


def is_stuck(plan: Plan, now=None) -> bool:
    """A rollout in progress that no live worker holds and that has been silent for longer
    than a hand-over between two steps: its worker died (or its message was lost)."""
    return plan.is_stuck(now) and not advisory_lock_held_elsewhere(ROLLOUT_LEASE, plan.pk)


def _labels(node: dict | None) -> dict[str, str]:
    return ((node or {}).get("metadata") or {}).get("labels") or {}


def _failure_reason(kube: KubeGateway, node: str) -> str:
    """The newest Warning event about the node (the MIG manager's reason), if any."""
    events = [
        e
        for e in kube.list("Event", "default", field_selector=f"involvedObject.name={node}")
        if e.get("type") == "Warning"
    ]
    events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return events[-1].get("message", "") if events else ""


def _active(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Pending", "Running")


def holds_gpus(pod: dict) -> bool:
    """A pod asking for any NVIDIA resource (whole GPUs, MIG slices, shared replicas)."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        for amounts in (res.get("requests") or {}, res.get("limits") or {}):
            if any(name.startswith("nvidia.com/") for name in amounts):
                return True
    return False


def evictable(pod: dict) -> bool:
    """Pods a drain moves: not DaemonSet pods (the GPU operator's own, which must stay), not
    static pods, not already leaving."""
    meta = pod.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    return (
        _active(pod)
        and not meta.get("deletionTimestamp")
        and not any(o.get("kind") == "DaemonSet" for o in owners)
        and "kubernetes.io/config.mirror" not in (meta.get("annotations") or {})
    )


def drain_order(pods: list[dict]) -> list[dict]:
    """The GPU pods to evict, lowest priority first (what matters least leaves first)."""
    movable = [p for p in pods if evictable(p) and holds_gpus(p)]
    return sorted(
        movable,
        key=lambda p: (
            (p.get("spec") or {}).get("priority") or 0,
            p["metadata"].get("namespace", ""),
            p["metadata"]["name"],
        ),
    )


def _key(pod: dict) -> str:
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


def drain(
    kube: KubeGateway, name: str, pods: list[dict], *, timeout_s: float, heartbeat=lambda: None
) -> tuple[bool, str]:
    """Evict the node's GPU pods through the Eviction API, so PodDisruptionBudgets hold: a pod
    its budget protects is retried until `timeout_s`, then the drain gives up and says which.
    Then wait until the evicted pods are gone. (Portal Jobs are requeued by Kueue; a
    Deployment's ReplicaSet makes a new pod elsewhere.)"""
    deadline = time.monotonic() + timeout_s
    waiting = drain_order(pods)
    evicted: set[str] = set()
    while waiting:
        blocked = []
        for pod in waiting:
            if kube.evict(pod["metadata"]["name"], pod["metadata"]["namespace"]) == "blocked":
                blocked.append(pod)
            else:
                evicted.add(_key(pod))
        waiting = blocked
        if waiting:
            if time.monotonic() > deadline:
                names = ", ".join(_key(p) for p in waiting)
                return False, (
                    f"drain blocked after {timeout_s:.0f} s: a PodDisruptionBudget allows no "
                    f"disruption of {names}"
                )
            heartbeat()
            time.sleep(1.0)
    while True:
        left = [
            _key(p)
            for p in kube.list("Pod", field_selector=f"spec.nodeName={name}")
            if _key(p) in evicted and _active(p)
        ]
        if not left:
            return True, f"evicted {len(evicted)} pod(s)"
        if time.monotonic() > deadline:
            return False, f"evicted pods still on the node after {timeout_s:.0f} s: {left}"
        heartbeat()
        time.sleep(0.2)


def apply_node(
    kube: KubeGateway,
    plan: Plan,
    entry: dict,
    *,
    actor=None,
    timeout_s: float = 60.0,
    drain_timeout_s: float = 120.0,
    heartbeat=lambda: None,
) -> tuple[bool, str]:
    """Cordon, drain, relabel one node and wait for its MIG manager; (succeeded, what
    happened). Safe to run again on a node a dead worker left half-way: labels already set
    are waited on, not set twice, and a node this rollout cordoned (`entry["cordoned"]`,
    saved by `heartbeat`) is uncordoned when it succeeds."""
    name = entry["node"]
    node = kube.get("Node", name)
    if node is None:
        return False, "the node is gone"
    labels = _labels(node)
    want: dict[str, str] = {}
    wait_for: list[str] = []
    if entry["mig_config"] and labels.get(MIG_CONFIG_LABEL) != entry["mig_config"]:
        # `pending` first: a stale `success` from the previous config must not read as done.
        want |= {MIG_CONFIG_LABEL: entry["mig_config"], MIG_STATE_LABEL: "pending"}
        wait_for.append(MIG_STATE_LABEL)
    elif entry["mig_config"] and labels.get(MIG_STATE_LABEL) not in (None, *DONE_STATES):
        wait_for.append(MIG_STATE_LABEL)  # relabelled by an earlier try: still in progress
    dp = entry["device_plugin_config"]
    if dp and labels.get(DP_CONFIG_LABEL) != dp:
        want[DP_CONFIG_LABEL] = dp
        if DP_STATE_LABEL in labels:  # only where something reports it
            want[DP_STATE_LABEL] = "pending"
            wait_for.append(DP_STATE_LABEL)
    elif dp and labels.get(DP_STATE_LABEL) not in (None, *DONE_STATES):
        wait_for.append(DP_STATE_LABEL)
    if not want and not wait_for:
        if entry.get("cordoned"):
            _uncordon(kube, plan, entry, actor)
        return True, "already labelled"
    if want:
        pods = [p for p in kube.list("Pod", field_selector=f"spec.nodeName={name}") if _active(p)]
        if pods and not (node.get("spec") or {}).get("unschedulable"):
            kube.merge_patch("Node", name, {"spec": {"unschedulable": True}})
            entry["cordoned"] = True
            heartbeat()
            audit.record(
                actor=actor,
                verb="node.cordoned",
                obj=plan,
                tenant=None,
                after={"node": name, "pods": len(pods)},
            )
        # Elastic layouts change idle GPUs only (`policy["drain"]` False): the pods on the
        # node's other GPUs keep running; the cordon keeps new ones off while it changes.
        if drain_order(pods) and plan.policy.get("drain", True):
            ok, message = drain(kube, name, pods, timeout_s=drain_timeout_s, heartbeat=heartbeat)
            audit.record(
                actor=actor,
                verb="node.drained" if ok else "node.drain_failed",
                obj=plan,
                tenant=None,
                after={"node": name, "message": message},
            )
            if not ok:
                return False, f"{message}; nothing relabelled (left cordoned)"
        before = {k: labels.get(k) for k in want}
        kube.merge_patch("Node", name, {"metadata": {"labels": want}})
        audit.record(
            actor=actor,
            verb="node.relabelled",
            obj=plan,
            tenant=None,
            before={"node": name, **before},
            after={"node": name, **want},
        )
    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    beat_at = time.monotonic()
    while True:
        labels = _labels(kube.get("Node", name))
        states = {k: labels.get(k, "") for k in wait_for}
        if all(s in DONE_STATES for s in states.values()):
            break
        if time.monotonic() > deadline:
            return False, f"timed out after {timeout_s:.0f} s waiting for {states}; left cordoned"
        if time.monotonic() - beat_at > 5:
            heartbeat()
            beat_at = time.monotonic()
        time.sleep(0.2)
    applied = {
        k: v for k, v in ((MIG_CONFIG_LABEL, entry["mig_config"]), (DP_CONFIG_LABEL, dp)) if v
    }
    if any(s == "failed" for s in states.values()):
        reason = _failure_reason(kube, name) or "the MIG manager reported failed"
        changes = ", ".join(f"{k}={v}" for k, v in applied.items() if k in want or not want)
        message = f"{changes} failed: {reason}"
        if entry.get("cordoned"):
            message += " (left cordoned)"
        return False, message
    if entry.get("cordoned"):
        _uncordon(kube, plan, entry, actor)
    return True, "applied: " + ", ".join(
        f"{k}={v}" for k, v in applied.items() if k in want or not want
    )


def _uncordon(kube: KubeGateway, plan: Plan, entry: dict, actor) -> None:
    kube.merge_patch("Node", entry["node"], {"spec": {"unschedulable": False}})
    entry["cordoned"] = False
    audit.record(
        actor=actor, verb="node.uncordoned", obj=plan, tenant=None, after={"node": entry["node"]}
    )


def _pending(plan: Plan) -> list[dict]:
    """Changed nodes this rollout still has to do (all of them, or those it was asked for)."""
    only = plan.rollout_nodes
    return [
        e
        for e in plan.changed_nodes
        if e["state"] != "applied" and (only is None or e["node"] in only)
    ]


def begin(
    kube: KubeGateway,
    plan_id: int,
    *,
    actor=None,
    nodes: list[str] | None = None,
    controller: str = "",
) -> Plan:
    """Start a rollout, or resume one whose worker died (a new rollout id either way, so a
    step still in flight from before does nothing more); publish the configs. A person must
    be a platform admin; `controller` names the portal's own controller instead (elastic
    layouts), which applies only plans it made (`Plan.policy["controller"]`)."""
    if controller:
        made_by = Plan.objects.filter(pk=plan_id).values_list("policy", flat=True).first()
        if (made_by or {}).get("controller") != controller:
            raise PermissionDenied(f"{controller} applies only the plans it made")
    else:
        require_platform_admin(actor, "apply MIG plans")
    with transaction.atomic():
        plan = Plan.objects.select_for_update().get(pk=plan_id)
        resuming = is_stuck(plan)
        plan.transition("resume" if resuming else "start")
        if not resuming:
            plan.rollout_nodes = list(nodes) if nodes else None
        plan.applied_by = actor
        plan.save()
        audit.record(
            actor=actor,
            verb="plan.apply_resumed" if resuming else "plan.apply_started",
            obj=plan,
            tenant=None,
            after={"nodes": plan.rollout_nodes or "all"},
        )
    publishing.publish_configs(kube, plan, actor)
    return plan


def _end(kube: KubeGateway, plan: Plan, actor, failed: dict | None) -> None:
    if failed:
        plan.transition("fail")
        plan.failed_node, plan.error = failed["node"], failed["message"]
    else:
        plan.transition("finish")
    plan.save()
    audit.record(
        actor=actor,
        verb="plan.failed" if failed else "plan.applied",
        obj=plan,
        tenant=None,
        after={"failed_node": plan.failed_node, "error": plan.error},
    )


def step(
    kube: KubeGateway,
    plan_id: int,
    rollout_id: str,
    *,
    actor=None,
    timeout_s: float | None = None,
    drain_timeout_s: float | None = None,
) -> bool:
    """Apply the next pending node of the rollout `rollout_id`; True when more nodes remain.
    One node per step keeps each task short whatever the fleet's size; a step whose rollout
    was abandoned or resumed elsewhere stops, and so does one while another worker holds the
    plan's lease. The plan ends failed at the first node that fails (the nodes after it are
    left alone), applied after the last."""
    with lease(plan_id) as held:
        if not held:
            return False
        return _step(
            kube,
            plan_id,
            rollout_id,
            actor=actor,
            timeout_s=timeout_s,
            drain_timeout_s=drain_timeout_s,
        )


def _step(
    kube: KubeGateway,
    plan_id: int,
    rollout_id: str,
    *,
    actor,
    timeout_s: float | None,
    drain_timeout_s: float | None,
) -> bool:
    timeout_s = settings.MIG_NODE_TIMEOUT_S if timeout_s is None else timeout_s
    drain_timeout_s = settings.MIG_DRAIN_TIMEOUT_S if drain_timeout_s is None else drain_timeout_s
    with transaction.atomic():
        plan = Plan.objects.select_for_update().get(pk=plan_id)
        if plan.status != Plan.Status.APPLYING or plan.rollout_id != rollout_id:
            return False
        pending = _pending(plan)
        if pending:
            entry = pending[0]
            entry["state"], entry["message"] = "applying", ""
            plan.heartbeat_at = timezone.now()
            plan.save(update_fields=["nodes", "heartbeat_at"])
        else:
            _end(kube, plan, actor, None)
    if not pending:
        inventory.sync_inventory(kube)
        return False

    def heartbeat() -> None:
        Plan.objects.filter(pk=plan_id, rollout_id=rollout_id).update(
            heartbeat_at=timezone.now(), nodes=plan.nodes
        )

    ok, message = apply_node(
        kube,
        plan,
        entry,
        actor=actor,
        timeout_s=timeout_s,
        drain_timeout_s=drain_timeout_s,
        heartbeat=heartbeat,
    )
    with transaction.atomic():
        fresh = Plan.objects.select_for_update().get(pk=plan_id)
        if fresh.rollout_id != rollout_id:
            # taken over while this node was in progress: the rollout that resumed owns the
            # nodes' states and their record now, and does this node again
            return False
        for e in fresh.nodes:
            if e["node"] == entry["node"]:
                e.update(entry, state="applied" if ok else "failed", message=message)
                done = e
        fresh.heartbeat_at = timezone.now()
        fresh.save(update_fields=["nodes", "heartbeat_at"])
        audit.record(
            actor=actor,
            verb="node.config_applied" if ok else "node.config_failed",
            obj=fresh,
            tenant=None,
            after={"node": entry["node"], "message": message},
        )
        if fresh.status != Plan.Status.APPLYING:
            return False  # abandoned while this node was in progress (its result is kept)
        more = bool(_pending(fresh))
        if not ok or not more:
            _end(kube, fresh, actor, None if ok else done)
    if not ok or not more:
        inventory.sync_inventory(kube)
        return False
    return True


def apply_plan(
    kube: KubeGateway,
    plan_id: int,
    *,
    actor=None,
    nodes: list[str] | None = None,
    timeout_s: float | None = None,
    drain_timeout_s: float | None = None,
    controller: str = "",
) -> Plan:
    """Apply a plan (all its changed nodes, or only `nodes`) in this process, one node at a
    time (what the task chain does, one task per node). Running it again skips nodes already
    applied. Reached through the `apply_plan` task (queued by
    `orders.request_plan_apply`) and elastic layouts (`controller`); the actor is
    checked again here so that no other caller rolls a plan out for someone who may not."""
    plan = begin(kube, plan_id, actor=actor, nodes=nodes, controller=controller)
    while step(
        kube,
        plan_id,
        plan.rollout_id,
        actor=actor,
        timeout_s=timeout_s,
        drain_timeout_s=drain_timeout_s,
    ):
        pass
    return Plan.objects.get(pk=plan_id)
