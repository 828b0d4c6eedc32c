"""Applying a plan: publish the configs, then relabel its nodes one at a time.

For each changed node: cordon it when pods run there (no new work lands on GPUs being
re-created), set `nvidia.com/mig.config` (and the device plugin's config label), wait for the
MIG manager's `nvidia.com/mig.config.state` to reach `success`, uncordon. On `failed` (or a
timeout) the rollout stops: the node stays cordoned, the plan says which node and why, and the
nodes after it are left alone. Every step writes an audit event; the inventory is synced at the
end so pools follow the new layouts.
"""

from __future__ import annotations

import time

import yaml
from django.conf import settings
from django.db import transaction

from scheduler.catalog import facts
from scheduler.cluster import services
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.render import MANAGED_BY, MANAGED_BY_LABEL
from scheduler.mig import plans
from scheduler.mig.models import MigConfig, Plan
from tenants import audit
from tenants.permissions import require_platform_admin

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
DP_CONFIG_LABEL = "nvidia.com/device-plugin.config"
# NVIDIA's device plugin publishes no state; the local cluster's simulator does under this key.
DP_STATE_LABEL = "gpu-portal/device-plugin.config.state"
CONFIG_KIND_LABEL = "gpu-portal/config"
DONE_STATES = ("success", "failed")


def operator_namespace() -> str:
    return settings.GPU_OPERATOR_NAMESPACE


def config_map_name(kind: str) -> str:
    return f"gpu-portal-{settings.PORTAL_INSTANCE}-{kind}-config"


def config_manifests(
    mig_configs: dict[str, list[dict]], device_plugin_configs: dict[str, dict]
) -> list[dict]:
    """The operator namespace and the two ConfigMaps the MIG manager and the device plugin
    read (pure). mig-parted takes one file; the device plugin one file per config name."""
    ns = operator_namespace()
    labels = {MANAGED_BY_LABEL: MANAGED_BY}

    def config_map(kind: str, data: dict[str, str]) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": config_map_name(kind),
                "namespace": ns,
                "labels": {**labels, CONFIG_KIND_LABEL: kind},
            },
            "data": data,
        }

    mig_file = {"version": "v1", "mig-configs": dict(sorted(mig_configs.items()))}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}},
        config_map("mig-parted", {"config.yaml": yaml.safe_dump(mig_file, sort_keys=False)}),
        config_map(
            "device-plugin",
            {
                name: yaml.safe_dump(cfg, sort_keys=False)
                for name, cfg in device_plugin_configs.items()
            },
        ),
    ]


def publish_configs(kube: KubeGateway, plan: Plan, actor=None) -> None:
    for name, entries in plan.mig_configs.items():
        MigConfig.objects.get_or_create(name=name, defaults={"entries": entries})
    for manifest in config_manifests(plans.known_mig_configs(), device_plugin_configs()):
        kube.apply(manifest)
    audit.record(
        actor=actor,
        verb="plan.configs_published",
        obj=plan,
        tenant=None,
        after={"namespace": operator_namespace(), "generated": sorted(plan.mig_configs)},
    )


def device_plugin_configs() -> dict[str, dict]:
    """The portal's named device-plugin configs (the file beside the GPU catalog)."""
    return yaml.safe_load(facts.CATALOG_PATH.with_name("device-plugin-config.yaml").read_text())


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


def apply_node(
    kube: KubeGateway,
    plan: Plan,
    entry: dict,
    *,
    actor=None,
    timeout_s: float = 60.0,
) -> tuple[bool, str]:
    """Relabel one node and wait for its MIG manager; (succeeded, what happened)."""
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
    dp = entry["device_plugin_config"]
    if dp and labels.get(DP_CONFIG_LABEL) != dp:
        want[DP_CONFIG_LABEL] = dp
        if DP_STATE_LABEL in labels:  # only where something reports it
            want[DP_STATE_LABEL] = "pending"
            wait_for.append(DP_STATE_LABEL)
    if not want:
        return True, "already labelled"
    pods = [
        p
        for p in kube.list("Pod", field_selector=f"spec.nodeName={name}")
        if (p.get("status") or {}).get("phase") in ("Pending", "Running")
    ]
    cordoned = False
    if pods and not (node.get("spec") or {}).get("unschedulable"):
        kube.merge_patch("Node", name, {"spec": {"unschedulable": True}})
        cordoned = True
        audit.record(
            actor=actor,
            verb="node.cordoned",
            obj=plan,
            tenant=None,
            after={"node": name, "pods": len(pods)},
        )
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
    while True:
        labels = _labels(kube.get("Node", name))
        states = {k: labels.get(k, "") for k in wait_for}
        if all(s in DONE_STATES for s in states.values()):
            break
        if time.monotonic() > deadline:
            return False, f"timed out after {timeout_s:.0f} s waiting for {states}; left cordoned"
        time.sleep(0.2)
    if any(s == "failed" for s in states.values()):
        reason = _failure_reason(kube, name) or "the MIG manager reported failed"
        changes = ", ".join(f"{k}={v}" for k, v in want.items() if not k.endswith(".state"))
        message = f"{changes} failed: {reason}"
        if cordoned:
            message += " (left cordoned)"
        return False, message
    if cordoned:
        kube.merge_patch("Node", name, {"spec": {"unschedulable": False}})
        audit.record(
            actor=actor, verb="node.uncordoned", obj=plan, tenant=None, after={"node": name}
        )
    return True, "applied: " + ", ".join(
        f"{k}={v}" for k, v in want.items() if not k.endswith("state")
    )


def apply_plan(
    kube: KubeGateway,
    plan_id: int,
    *,
    actor=None,
    nodes: list[str] | None = None,
    timeout_s: float = 60.0,
) -> Plan:
    """Apply a plan (all its changed nodes, or only `nodes`), one node at a time; stop at the
    first failure. Running it again skips nodes already applied. Reached through the
    `apply_plan` task (queued by `services.request_plan_apply`); the actor is checked again here
    so that no other caller rolls a plan out for someone who may not."""
    require_platform_admin(actor, "apply MIG plans")
    with transaction.atomic():
        plan = Plan.objects.select_for_update().get(pk=plan_id)
        resuming = plan.is_stuck()
        plan.transition("resume" if resuming else "start")
        plan.save()
        audit.record(
            actor=actor,
            verb="plan.apply_resumed" if resuming else "plan.apply_started",
            obj=plan,
            tenant=None,
            after={"nodes": nodes or "all"},
        )
    publish_configs(kube, plan, actor)
    failed = None
    for entry in plan.nodes:
        if not entry["changed_gpus"] or entry["state"] == "applied":
            continue
        if nodes is not None and entry["node"] not in nodes:
            continue
        ok, message = apply_node(kube, plan, entry, actor=actor, timeout_s=timeout_s)
        entry["state"], entry["message"] = ("applied" if ok else "failed"), message
        plan.save(update_fields=["nodes"])
        audit.record(
            actor=actor,
            verb="node.config_applied" if ok else "node.config_failed",
            obj=plan,
            tenant=None,
            after={"node": entry["node"], "message": message},
        )
        if not ok:
            failed = entry
            break
    with transaction.atomic():
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
    services.sync_inventory(kube)
    return plan
