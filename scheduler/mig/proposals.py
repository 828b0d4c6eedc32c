"""Planning services: read the fleet and the approved demand from the database, run the pure
planner (scheduler.mig.planner) and keep its proposal as a Plan row."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict
from datetime import timedelta

import yaml
from django.conf import settings
from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from catalog import facts
from core import audit
from core.errors import InvalidInput
from core.permissions import require_platform_admin
from scheduler.cluster import node_offers
from scheduler.cluster.models import Node, PodAllocation
from scheduler.mig import configs as mig_configs
from scheduler.mig import layouts
from scheduler.mig import planner as pl
from scheduler.mig.models import DevicePluginConfig, MigConfig, Plan
from tenants.models import CapacityRequest, CapacityRequestItem, QuotaGrant


def known_mig_configs() -> dict[str, list[dict]]:
    """The portal's file of mig-parted configs plus every generated config published so far."""
    configs = dict(layouts.load_mig_configs(str(settings.MIG_PARTED_CONFIG)))
    configs.update(MigConfig.objects.values_list("name", "entries"))
    return configs


def file_device_plugin_configs() -> dict[str, dict]:
    """The portal's named device-plugin configs (the file beside the GPU catalog)."""
    return yaml.safe_load(facts.CATALOG_PATH.with_name("device-plugin-config.yaml").read_text())


def known_device_plugin_configs() -> dict[str, dict]:
    """The portal's file of device-plugin configs plus every generated one published so far."""
    configs = file_device_plugin_configs()
    configs.update(DevicePluginConfig.objects.values_list("name", "config"))
    return configs


def shape_to_json(shape: pl.Shape) -> dict:
    return {"mode": shape.mode, "devices": dict(shape.devices), "replicas": shape.replicas}


def shape_from_json(data: dict) -> pl.Shape:
    devices = tuple(sorted((k, int(v)) for k, v in data.get("devices", {}).items()))
    return pl.Shape(data["mode"], devices, int(data.get("replicas", 1)))


def current_shapes(
    node: Node, configs: dict[str, list[dict]], dp_configs: dict[str, dict] | None = None
) -> list[pl.Shape]:
    model = facts.get_model(node.gpu_model)
    if not model.mig_capable:
        if dp_configs and node.device_plugin_config in dp_configs:
            # which GPUs are shared: the config may list some (a node part whole, part shared);
            # believed when GFD's replicas label agrees (the config label is what was asked
            # for, and a change may be pending or have failed)
            config = dp_configs[node.device_plugin_config]
            shapes = mig_configs.sharing_shapes(config, node.gpu_count)
            if max((s.replicas for s in shapes), default=1) == max(node.sharing_replicas, 1):
                return shapes
        shape = (
            pl.Shape("shared", (), node.sharing_replicas) if node.sharing_replicas > 1 else pl.WHOLE
        )
        return [shape] * node.gpu_count
    shapes = mig_configs.config_shapes(model, node.gpu_count, configs.get(node.mig_config, []))
    return shapes or [pl.WHOLE] * node.gpu_count


def class_of(model: facts.GpuModel, resource: str, shared: bool) -> str:
    """The resource class a pod's GPU resource is a unit of, on a node of the model."""
    if resource.startswith("nvidia.com/mig-"):
        return facts.class_slug(model, "mig", resource[len("nvidia.com/mig-") :])
    if resource == facts.SHARED_GPU_RESOURCE or shared:
        return facts.class_slug(model, "shared")
    return facts.class_slug(model, "whole")


def fleet_from_inventory(
    configs: dict[str, list[dict]] | None = None,
    dp_configs: dict[str, dict] | None = None,
) -> tuple[list[pl.GpuState], dict[str, tuple[str, str]]]:
    """Every GPU of the inventory with its shape and what pods hold on it. Pods take a node's
    instances of their class in GPU order (the device plugin does not say which GPU)."""
    configs = configs if configs is not None else known_mig_configs()
    dp_configs = dp_configs if dp_configs is not None else known_device_plugin_configs()
    pods: dict[str, list[PodAllocation]] = defaultdict(list)
    for alloc in PodAllocation.objects.order_by("started_at", "uid"):
        pods[alloc.node_name].append(alloc)
    gpus, labels = [], {}
    # a node served through DRA has no layout to plan: its placements are cut on demand
    nodes = Node.objects.exclude(gpu_model="").exclude(
        mig_strategy__in=(node_offers.DRA, node_offers.DRA_UNPUBLISHED)
    )
    for node in nodes.filter(gpu_count__gt=0).order_by("name"):
        model = facts.get_model(node.gpu_model)
        labels[node.name] = (node.mig_config, node.device_plugin_config)
        shapes = current_shapes(node, configs, dp_configs)
        # replicas advertised as plain nvidia.com/gpu (a config not renamed) only when every
        # GPU is shared; a node part whole, part shared advertises them renamed
        shared = node.sharing_replicas > 1 and all(s.mode == "shared" for s in shapes)
        queue: dict[str, list[str]] = defaultdict(list)  # class -> one pod per unit held
        for alloc in pods.get(node.name, []):
            for resource, n in alloc.resources.items():
                queue[class_of(model, resource, shared)] += [
                    f"{alloc.namespace}/{alloc.pod_name}"
                ] * n
        for index, shape in enumerate(shapes):
            busy: dict[str, int] = defaultdict(int)
            holders = set()
            for unit in pl.instance_units(model, shape):
                if queue[unit]:
                    holders.add(queue[unit].pop(0))
                    busy[unit] += 1
            gpus.append(
                pl.GpuState(
                    node.name,
                    index,
                    model.key,
                    shape,
                    tuple(sorted(busy.items())),
                    tuple(sorted(holders)),
                )
            )
    return gpus, labels


def approved_demand(*, include_pending: bool = False) -> dict[str, int]:
    """Units per class slug that grants hold (now or later), plus asks still waiting if wanted."""
    demand: dict[str, int] = defaultdict(int)
    for slug, total in (
        QuotaGrant.objects.holding()
        .values("resource_class__slug")
        .annotate(total=Sum("amount"))
        .values_list("resource_class__slug", "total")
    ):
        demand[slug] += total
    if include_pending:
        for slug, total in (
            CapacityRequestItem.objects.filter(request__state=CapacityRequest.State.SUBMITTED)
            .values("resource_class__slug")
            .annotate(total=Sum("amount"))
            .values_list("resource_class__slug", "total")
        ):
            demand[slug] += total
    return dict(demand)


SHARING_MODES = ("time-slicing", "mps")
METHODS = ("exact", "greedy")


def create_plan(
    *,
    actor,
    allow_draining: bool = False,
    include_pending: bool = False,
    nodes: list[str] | None = None,
    large_shape_weight: float = 0.0,
    sharing: str = "time-slicing",
    method: str = "exact",
    demand: dict[str, int] | None = None,
) -> Plan:
    """Propose layouts for the inventory (or only `nodes`) and keep the proposal (platform
    admins only; one `plan.proposed` event). Applying it is the job of
    `scheduler.mig.orders`."""
    require_platform_admin(actor, "make MIG plans")
    if sharing not in SHARING_MODES:
        raise InvalidInput(f"sharing must be one of {', '.join(SHARING_MODES)}", field="sharing")
    if method not in METHODS:
        raise InvalidInput(f"method must be one of {', '.join(METHODS)}", field="method")
    # NaN fails `>= 0`; infinity would reach the JSON column, which refuses it (a 500)
    if not (large_shape_weight >= 0 and math.isfinite(large_shape_weight)):
        raise InvalidInput(
            "the large-shape weight must be a finite number ≥ 0, e.g. 0.5",
            field="large_shape_weight",
        )
    policy = pl.Policy(
        allow_draining=allow_draining,
        large_shape_weight=large_shape_weight,
        sharing=sharing,
        nodes=frozenset(nodes) if nodes else None,
    )
    configs, dp_configs = known_mig_configs(), known_device_plugin_configs()
    gpus, labels = fleet_from_inventory(configs, dp_configs)
    unknown = sorted(set(nodes or []) - set(labels))
    if unknown:  # a typo would plan nothing for it; a NUL would reach the JSON column (a 500)
        shown = ", ".join(repr(n[:63]) for n in unknown[:3])
        raise InvalidInput(f"no GPU node named {shown} in the inventory", field="node")
    demand = demand if demand is not None else approved_demand(include_pending=include_pending)
    solve = pl.plan_greedy if method == "greedy" else pl.plan_exact
    result = solve(gpus, demand, policy)
    policy_json = {
        **asdict(policy),
        "nodes": sorted(policy.nodes or []),
        "include_pending": include_pending,
    }
    return save_plan(
        actor=actor,
        result=result,
        policy=policy,
        policy_json=policy_json,
        fleet=(gpus, labels, configs, dp_configs),
    )


Fleet = tuple[list[pl.GpuState], dict[str, tuple[str, str]], dict[str, list[dict]], dict[str, dict]]


def save_plan(
    *, actor, result: pl.PlanResult, policy: pl.Policy, policy_json: dict, fleet: Fleet
) -> Plan:
    """Keep a proposal, the configs it needs and one `plan.proposed` event: the console's
    plans (`create_plan`) and elastic layouts' (`scheduler.mig.reshaping`, actor None)."""
    gpus, labels, configs, dp_configs = fleet
    proposals, new_configs = mig_configs.propose_nodes(
        gpus, result, labels, configs, policy, dp_configs
    )
    if policy.nodes is not None:
        proposals = [p for p in proposals if p.node in policy.nodes]
    with transaction.atomic():
        plan = Plan.objects.create(
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
            method=result.method,
            policy=policy_json,
            summary={
                "demand": result.demand,
                "served": result.served,
                "unserved": result.unserved,
                "supply_before": result.supply_before,
                "supply_after": result.supply_after,
                "served_gpu_eq": round(result.served_weight(), 3),
                "changed_gpus": len(result.changed),
                "disturbed_pods": result.disturbed_pods,
                "solve_seconds": round(result.solve_seconds, 4),
            },
            nodes=[
                {
                    "node": p.node,
                    "model": p.model,
                    "current": [shape_to_json(s) for s in p.current],
                    "proposed": [shape_to_json(s) for s in p.proposed],
                    "current_mig_config": labels[p.node][0],
                    "current_device_plugin_config": labels[p.node][1],
                    "mig_config": p.mig_config,
                    "device_plugin_config": p.device_plugin_config,
                    "changed_gpus": p.changed_gpus,
                    "disturbed_pods": p.disturbed_pods,
                    "state": "pending" if p.changed else "unchanged",
                    "message": "",
                }
                for p in proposals
            ],
            mig_configs=new_configs,
            device_plugin_configs={
                p.device_plugin_config: p.device_plugin_entry
                for p in proposals
                if p.device_plugin_entry is not None
            },
        )
        audit.record(
            actor=actor,
            verb="plan.proposed",
            obj=plan,
            tenant=None,
            after={
                "changed_gpus": len(result.changed),
                "unserved": result.unserved,
                "nodes": [p.node for p in proposals if p.changed],
            },
        )
    return plan


def recent_reshapes(now=None, within_s: int = 3600) -> dict[str, dict]:
    """node -> the latest plan re-shaping it now or in the last `within_s` seconds: its id,
    whether it is still applying, who made it (a controller such as elastic layouts, or a
    platform admin), why, which GPUs it changes, and when (the capacity map marks them)."""
    now = now or timezone.now()
    since = now - timedelta(seconds=within_s)
    out: dict[str, dict] = {}
    plans = Plan.objects.filter(
        Q(status=Plan.Status.APPLYING) | Q(status=Plan.Status.APPLIED, finished_at__gte=since)
    ).order_by("-started_at", "-pk")[:20]
    for plan in plans:
        for n in plan.nodes:
            if not n["changed_gpus"] or n["node"] in out:
                continue
            out[n["node"]] = {
                "plan": plan.pk,
                "applying": plan.status == Plan.Status.APPLYING,
                "by": plan.policy.get("controller") or "a platform admin",
                "reason": plan.policy.get("reason", ""),
                "gpus": [int(g) for g in n["changed_gpus"]],
                "at": plan.finished_at or plan.started_at,
            }
    return out
