"""Per-GPU layouts of nodes, from the mig-parted config their label names (pure), and the
geometry of the capacity map drawing."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

from catalog import facts


@dataclass(frozen=True)
class Instance:
    profile: str  # "" for a whole GPU or a shared replica
    start: int  # first compute slice it is drawn at
    compute_slices: int
    resource_name: str


@dataclass
class Gpu:
    index: int
    mode: str  # "mig", "whole" or "shared"
    instances: list[Instance] = field(default_factory=list)


@cache
def load_mig_configs(path: str) -> dict[str, list[dict]]:
    return yaml.safe_load(Path(path).read_text())["mig-configs"]


def _entry_for_gpu(entries: list[dict], model: facts.GpuModel, index: int) -> dict | None:
    for entry in entries:
        devices = entry.get("devices", "all")
        if devices != "all" and index not in devices:
            continue
        filters = entry.get("device-filter")
        if filters:
            filters = [filters] if isinstance(filters, str) else filters
            if not {f.upper() for f in filters} & {p.upper() for p in model.pci_device_ids}:
                continue
        return entry
    return None


def gpu_layouts(
    model_key: str,
    gpu_count: int,
    mig_config: str,
    sharing_replicas: int | list[int],
    configs: dict,
) -> list[Gpu]:
    """Each GPU of a node: its MIG instances placed by NVIDIA's rules, or one whole GPU, or
    its shared replicas (`sharing_replicas`: one count for every GPU, or one per GPU where a
    node shares only some). Unknown configs read as whole GPUs."""
    model = facts.get_model(model_key)
    entries = configs.get(mig_config, []) if model.mig_capable else []
    per_gpu = (
        sharing_replicas if isinstance(sharing_replicas, list) else [sharing_replicas] * gpu_count
    )
    gpus = []
    for index in range(gpu_count):
        replicas = per_gpu[index] if index < len(per_gpu) else 1
        entry = _entry_for_gpu(entries, model, index)
        devices = (entry or {}).get("mig-devices") or {}
        if entry and entry.get("mig-enabled") and devices:
            placement = facts.find_placement(model, devices) or ()
            x, instances = 0, []
            for name, _start in placement:
                profile = model.profile(name)
                instances.append(Instance(name, x, profile.compute_slices, profile.resource_name))
                x += profile.compute_slices
            gpus.append(Gpu(index, "mig", instances))
        elif replicas > 1:
            gpus.append(
                Gpu(
                    index,
                    "shared",
                    [Instance("", 0, 7, facts.WHOLE_GPU_RESOURCE) for _ in range(replicas)],
                )
            )
        else:
            gpus.append(Gpu(index, "whole", [Instance("", 0, 7, facts.WHOLE_GPU_RESOURCE)]))
    return gpus


@dataclass(frozen=True)
class Holder:
    """Who holds units: a team (its slug) and its workload where the pod says which; or a pod
    of no team, by its namespace (`tenant` is the namespace then, the map's colour key), with
    `outside` when the namespace is not the platform's either: a GPU used outside the portal
    (scheduler/cluster/outside_use.py)."""

    tenant: str
    workload: int | None = None
    workload_name: str = ""
    namespace: str = ""  # set for a pod of no team only
    outside: bool = False


@dataclass(frozen=True)
class Block:
    x: float
    width: float
    label: str
    tenant: str  # "" when free
    borrowed: bool = False  # held on quota the tenant borrows from others in the cohort
    holder: Holder | None = None  # what holds it, where the caller said more than the tenant


@dataclass
class GpuDrawing:
    index: int
    mode: str
    blocks: list[Block]
    free_slices: int


def assign_tenants(
    gpus: list[Gpu],
    held: dict[str, list[tuple[str | Holder, int]]],
    borrowed: dict[tuple[str, str], int] | None = None,
) -> list[GpuDrawing]:
    """Colour instances by the tenants whose pods hold them (a tenant's slug, or a `Holder`
    that says more: the block keeps it). The device plugin does not publish which device a pod
    got, so units of a resource are handed out in GPU order. `borrowed`
    ((resource, tenant) -> units its queue borrows on this GPU model; consumed as units are
    marked) marks that many of the tenant's instances as borrowed: Kueue counts borrowed units
    per queue, not per pod, so which ones is as arbitrary as the order."""
    # resource -> tenants in order, one entry per unit held
    queue = {name: [t for t, n in holders for _ in range(n)] for name, holders in held.items()}
    borrowed = borrowed if borrowed is not None else {}
    marks: list[bool] = []
    owners: list[Holder | None] = []  # the holder of each unit taken, beside `marks`

    def take(resource: str) -> str:
        units = queue.get(resource)
        who = units.pop(0) if units else ""
        owners.append(who if isinstance(who, Holder) else None)
        tenant = who.tenant if isinstance(who, Holder) else who
        left = borrowed.get((resource, tenant), 0)
        if tenant and left > 0:
            borrowed[(resource, tenant)] = left - 1
        marks.append(bool(tenant) and left > 0)
        return tenant

    # Replicas are nvidia.com/gpu.shared, or plain nvidia.com/gpu under a config not renamed;
    # a node that keeps whole GPUs beside shared ones renames them, and its nvidia.com/gpu
    # pods hold the whole GPUs.
    plain_replicas = not any(g.mode == "whole" for g in gpus)
    drawings = []
    for gpu in gpus:
        blocks = []
        if gpu.mode == "shared":
            width = 7 / len(gpu.instances)
            for i, inst in enumerate(gpu.instances):
                tenant = take(facts.SHARED_GPU_RESOURCE) or (
                    take(inst.resource_name) if plain_replicas else take("")
                )
                blocks.append(Block(i * width, width, "replica", tenant, marks[-1], owners[-1]))
            free = 0
        else:
            for inst in gpu.instances:
                tenant = take(inst.resource_name)
                blocks.append(
                    Block(
                        inst.start,
                        inst.compute_slices,
                        inst.profile or "whole GPU",
                        tenant,
                        marks[-1],
                        owners[-1],
                    )
                )
            free = 7 - sum(i.compute_slices for i in gpu.instances)
        drawings.append(GpuDrawing(gpu.index, gpu.mode, blocks, free))
    return drawings


def tenant_colours(tenants: list[str]) -> dict[str, str]:
    """Distinct, colour-blind-friendly colours (Okabe-Ito, then hues) by tenant."""
    palette = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442"]
    colours = {}
    for i, slug in enumerate(sorted(set(tenants))):
        colours[slug] = palette[i] if i < len(palette) else f"hsl({(i * 47) % 360} 55% 45%)"
    return colours


def group_held(
    rows: list[tuple[str, str | Holder, str, int]],
) -> dict[str, dict[str, list[tuple[str | Holder, int]]]]:
    """(node, tenant or holder, resource, units) rows -> node -> resource -> [(it, units)]."""
    out: dict[str, dict[str, list[tuple[str | Holder, int]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for node, tenant, resource, units in rows:
        out[node][resource].append((tenant, units))
    return out
