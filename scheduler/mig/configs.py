"""Per node: the mig-parted config and device-plugin config that select a plan's shapes (pure).

A known config (the portal's file, or one published before) that gives exactly the proposed
shapes is reused by name; otherwise a content-addressed one is generated, so the same layout
always gets the same name.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass

from scheduler.catalog import facts
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


def propose_nodes(
    gpus: list[GpuState],
    result: PlanResult,
    current_configs: dict[str, tuple[str, str]],
    known: dict[str, list[dict]],
    policy: Policy | None = None,
) -> tuple[list[NodeProposal], dict[str, list[dict]]]:
    """Per node, the labels that select the proposed shapes; and the new mig-parted configs
    to publish. `current_configs`: node -> (mig config, device-plugin config) today. A known
    config (the portal's file, or one published before) that gives exactly the proposed shapes
    is reused by name; otherwise a generated one is made."""
    policy = policy or Policy()
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
        mig_config, dp_config = mig_now, dp_now
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
            shape = proposed[0]
            if shape.mode == "shared":
                # renamed: replicas are advertised as nvidia.com/gpu.shared, the resource shared
                # classes ask for (plain nvidia.com/gpu would leave them unusable)
                prefix = "mps" if policy.sharing == "mps" else "time-sliced"
                dp_config = f"{prefix}-{shape.replicas}-renamed"
            else:
                dp_config = "default"
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
            )
        )
    return proposals, new_configs
