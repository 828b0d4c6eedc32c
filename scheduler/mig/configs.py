"""Per node: the mig-parted config and device-plugin config that select a plan's shapes (pure).

A known config (the portal's file, or one published before) that gives exactly the proposed
shapes is reused by name; otherwise a content-addressed one is generated, so the same layout
always gets the same name. A node that shares only some of its GPUs gets a device-plugin config
that lists them by index (`devices: ["0", "1"]`, which NVIDIA's device plugin takes per
resource); the others stay nvidia.com/gpu.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field

from catalog import facts
from scheduler.mig.layouts import _entry_for_gpu
from scheduler.mig.planner import WHOLE, GpuState, PlanResult, Policy, Shape


@dataclass
class NodeProposal:
    node: str
    model: str
    current: list[Shape]
    proposed: list[Shape]
    mig_config: str  # label value to set ("" for non-MIG models)
    device_plugin_config: str
    changed_gpus: list[int]
    disturbed_pods: list[str]
    # the device-plugin config to publish under `device_plugin_config`, when generated
    device_plugin_entry: dict | None = field(default=None)

    @property
    def changed(self) -> bool:
        return bool(self.changed_gpus)


def mig_entries(shapes: list[Shape]) -> list[dict]:
    """mig-parted v1 entries for one node: GPUs with the same shape share an entry."""
    groups: dict[Shape, list[int]] = defaultdict(list)
    for index, shape in enumerate(shapes):
        groups[shape].append(index)
    entries = []
    for shape, indices in sorted(groups.items(), key=lambda kv: kv[1][0]):
        entry: dict = {"devices": indices, "mig-enabled": shape.mode == "mig"}
        if shape.mode == "mig":
            entry["mig-devices"] = dict(shape.devices)
        entries.append(entry)
    return entries


def config_shapes(model: facts.GpuModel, gpu_count: int, entries: list[dict]) -> list[Shape]:
    """Per-GPU shapes a mig-parted config gives a node of this model (device filters and
    per-index entries as scheduler.mig.layouts reads them)."""
    shapes = []
    for index in range(gpu_count):
        entry = _entry_for_gpu(entries, model, index)
        if entry is None:  # no entry for this model or GPU: the MIG manager would fail
            return []
        if entry.get("mig-enabled"):
            shapes.append(Shape.mig(dict(entry.get("mig-devices") or {})))
        else:
            shapes.append(WHOLE)
    return shapes


def generated_name(model: facts.GpuModel, shapes: list[Shape]) -> str:
    """Content-addressed, so the same layout always gets the same name (<= 63 chars)."""
    text = repr((model.slug, [tuple(s) for s in shapes]))
    return f"portal-{model.slug[:20]}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


GPU_RESOURCE = "nvidia.com/gpu"


def sharing_config(sharing: str, replicas: int, devices: list[int] | None = None) -> dict:
    """A device-plugin config sharing whole GPUs (all, or only `devices`), renamed so replicas
    are advertised as nvidia.com/gpu.shared, the resource shared classes ask for."""
    resource: dict = {"name": GPU_RESOURCE, "replicas": replicas}
    if devices is not None:
        resource["devices"] = [str(i) for i in devices]  # GPU indices, as the plugin spells them
    section = "mps" if sharing == "mps" else "timeSlicing"
    return {
        "version": "v1",
        "flags": {"migStrategy": "mixed"},
        "sharing": {section: {"renameByDefault": True, "resources": [resource]}},
    }


def sharing_shapes(config: dict, gpu_count: int) -> list[Shape]:
    """Per-GPU shapes a device-plugin config gives a node of whole GPUs: the GPUs its
    nvidia.com/gpu entry shares (all, a count of the first, or those listed) are shared."""
    section = (config or {}).get("sharing") or {}
    shapes = [WHOLE] * gpu_count
    for resource in (section.get("timeSlicing") or section.get("mps") or {}).get("resources") or []:
        replicas = int(resource.get("replicas", 1))
        if resource.get("name") != GPU_RESOURCE or replicas < 2:
            continue
        devices = resource.get("devices", "all")
        if devices == "all":
            indices = list(range(gpu_count))
        elif isinstance(devices, int):
            indices = list(range(min(devices, gpu_count)))
        else:  # GPU indices; UUIDs and MIG indices name no whole GPU by position
            indices = [int(d) for d in devices if str(d).isdigit() and int(d) < gpu_count]
        for i in indices:
            shapes[i] = Shape("shared", (), replicas)
    return shapes


def generated_sharing_name(sharing: str, replicas: int, devices: list[int]) -> str:
    """Content-addressed like the mig-parted ones: the same sharing, the same name."""
    prefix = "mps" if sharing == "mps" else "time-sliced"
    text = repr((prefix, replicas, tuple(devices)))
    return f"portal-{prefix}-{replicas}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def _sharing_for(
    proposed: list[Shape], policy: Policy, known_dp: dict[str, dict]
) -> tuple[str, dict | None]:
    """(device-plugin config name, the config when generated) for a non-MIG node's shapes."""
    shared = [i for i, s in enumerate(proposed) if s.mode == "shared"]
    if not shared:
        return "default", None
    replicas = proposed[shared[0]].replicas  # one count per node (the planner's rule)
    prefix = "mps" if policy.sharing == "mps" else "time-sliced"
    if len(shared) == len(proposed):
        # renamed: replicas are advertised as nvidia.com/gpu.shared, the resource shared
        # classes ask for (plain nvidia.com/gpu would leave them unusable)
        return f"{prefix}-{replicas}-renamed", None
    config = sharing_config(policy.sharing, replicas, shared)
    for name in sorted(known_dp):
        if known_dp[name] == config:
            return name, None
    return generated_sharing_name(policy.sharing, replicas, shared), config


def propose_nodes(
    gpus: list[GpuState],
    result: PlanResult,
    current_configs: dict[str, tuple[str, str]],
    known: dict[str, list[dict]],
    policy: Policy | None = None,
    known_dp: dict[str, dict] | None = None,
) -> tuple[list[NodeProposal], dict[str, list[dict]]]:
    """Per node, the labels that select the proposed shapes; and the new mig-parted configs
    to publish (a node's generated device-plugin config is its `device_plugin_entry`).
    `current_configs`: node -> (mig config, device-plugin config) today. A known config (the
    portal's file, or one published before) that gives exactly the proposed shapes is reused
    by name; otherwise a generated one is made."""
    policy = policy or Policy()
    known_dp = known_dp or {}
    per_node: dict[str, list[GpuState]] = defaultdict(list)
    for g in gpus:
        per_node[g.node].append(g)
    changed = set(result.changed)
    proposals, new_configs = [], {}
    for node, node_gpus in sorted(per_node.items()):
        node_gpus.sort(key=lambda g: g.index)
        model = facts.get_model(node_gpus[0].model)
        current = [g.shape for g in node_gpus]
        proposed = [result.proposed.get((g.node, g.index), g.shape) for g in node_gpus]
        mig_now, dp_now = current_configs.get(node, ("", ""))
        mig_config, dp_config, dp_entry = mig_now, dp_now, None
        touched = [g.index for g in node_gpus if (g.node, g.index) in changed]
        if touched and model.mig_capable:
            named = [mig_now] + sorted(n for n in known if n != mig_now)
            mig_config = next(
                (
                    n
                    for n in named
                    if n in known and config_shapes(model, len(proposed), known[n]) == proposed
                ),
                "",
            )
            if not mig_config:
                mig_config = generated_name(model, proposed)
                new_configs[mig_config] = mig_entries(proposed)
        if touched and not model.mig_capable:
            dp_config, dp_entry = _sharing_for(proposed, policy, known_dp)
        proposals.append(
            NodeProposal(
                node=node,
                model=model.key,
                current=current,
                proposed=proposed,
                mig_config=mig_config,
                device_plugin_config=dp_config,
                changed_gpus=touched,
                disturbed_pods=sorted({p for g in node_gpus if g.index in touched for p in g.pods}),
                device_plugin_entry=dp_entry,
            )
        )
    return proposals, new_configs
