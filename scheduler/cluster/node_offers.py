"""Reading GPU nodes as NVIDIA's device plugin and GPU feature discovery describe them (pure).

A node's labels and allocatable tell its GPU model, MIG strategy and layout, sharing mode, and
how many units of each resource class it offers; the sum over schedulable, ready nodes is the
capacity of each pool.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from catalog import dra_devices, facts, product_labels, slices
from scheduler.cluster.render import labels as render_labels

PRODUCT_LABEL = "nvidia.com/gpu.product"
MIG_PREFIX = "nvidia.com/mig-"
# A node whose GPUs are served through DRA shows it as its MIG strategy: MIG cut on demand;
# one whose driver publishes no ResourceSlice (gone, restarting) offers nothing meanwhile.
DRA = "dra"
DRA_UNPUBLISHED = "dra-unpublished"
# A node with the portal's health taint (scheduler/health) offers nothing to the pools while it
# is there, whoever's value (portal instance) it carries.
HEALTH_TAINT_KEY = render_labels.HEALTH_TAINT_KEY


# What the platform sets on a GPU node once its NVIDIA container toolkit hands devices only to
# the pods allocated them (docs/deploy.md, "GPU nodes"): the console warns where it is missing.
TOOLKIT_LABEL = "gpu-portal.io/devices-as-mounts"


@dataclass(frozen=True)
class NodeInfo:
    name: str
    uid: str
    gpu_model: str  # catalog key, "" when the node has no GPU the catalog knows
    gpu_product: str
    gpu_count: int
    gpu_memory_mib: int
    mig_strategy: str
    mig_config: str
    mig_config_state: str
    sharing_strategy: str
    sharing_replicas: int
    device_plugin_config: str
    allocatable: dict[str, int]  # GPU resource names only
    labels: dict[str, str]
    schedulable: bool
    ready: bool
    # resource class slug -> units this node offers
    units: dict[str, int] = field(default_factory=dict)
    health_tainted: bool = False
    taints: list[str] = field(default_factory=list)  # keys of the node's taints, sorted


def _int(value, default: int = 0) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def class_units(
    model_key: str, allocatable: dict[str, int], sharing: str, product: str
) -> dict[str, int]:
    """Units per resource class slug that one node offers (slugs spelt by `facts.class_slug`)."""
    if not model_key:
        return {}
    model = facts.get_model(model_key)
    units: Counter = Counter()
    single_profile = product.split("-MIG-", 1)[1] if "-MIG-" in product else ""
    for name, count in allocatable.items():
        if count <= 0:
            continue
        if name.startswith(MIG_PREFIX):
            profile = name[len(MIG_PREFIX) :]
            units[facts.class_slug(model, "mig", profile)] += count
        elif name == facts.SHARED_GPU_RESOURCE:
            units[facts.class_slug(model, "shared")] += count
        elif name == facts.WHOLE_GPU_RESOURCE:
            if single_profile:  # MIG strategy `single`: nvidia.com/gpu counts MIG devices
                units[facts.class_slug(model, "mig", single_profile)] += count
            elif sharing in ("time-slicing", "mps"):  # replicas advertised without renaming
                units[facts.class_slug(model, "shared")] += count
            else:
                units[facts.class_slug(model, "whole")] += count
    return dict(units)


def dra_units(model_key: str, gpus: int) -> dict[str, int]:
    """Units per class slug a node of `gpus` GPUs served through DRA offers: each GPU one whole
    GPU or as many of a MIG profile as it can be cut into (what could be allocated, not what
    is cut: the approval also counts the model's slices, tenants/services/capacity.py)."""
    if not model_key or gpus <= 0:
        return {}
    model = facts.get_model(model_key)
    units = {facts.class_slug(model, "whole"): gpus}
    for profile in model.profiles.values():
        units[facts.class_slug(model, "mig", profile.name)] = gpus * profile.max_instances
    return units


def dra_free(model_key: str, gpus: int, held: Mapping[str, int]) -> dict[str, int]:
    """Units per class slug a DRA node could still allocate, given the devices its pods hold
    (resource name -> count, as `parse_gpu_pod` counts them): each class bounded by its own
    placements and by the node's free compute slices (an estimate across GPUs: the scheduler
    places within each GPU's counters)."""
    if not model_key or gpus <= 0:
        return {}
    model = facts.get_model(model_key)
    per_unit = slices.resource_slices([model])
    free_slices = gpus * slices.SLICES_PER_GPU - sum(
        per_unit.get(name, 0) * n for name, n in held.items()
    )
    resources = {facts.class_slug(model, "whole"): facts.WHOLE_GPU_RESOURCE}
    for p in model.profiles.values():
        resources[facts.class_slug(model, "mig", p.name)] = p.resource_name
    out = {}
    for slug, n in dra_units(model_key, gpus).items():
        resource = resources[slug]
        room = max(0, free_slices) // max(1, per_unit.get(resource, slices.SLICES_PER_GPU))
        out[slug] = max(0, min(n - held.get(resource, 0), room))
    return out


def parse_node(
    node: dict,
    labels_by_model: Mapping[str, str] | None = None,
    keep: Collection[str] = (),
    dra_models: Collection[str] = (),
    dra_published: Collection[str] | None = None,
) -> NodeInfo:
    """A node as the portal sees it. Its model comes from GFD's product label alone, the label
    workloads and Kueue's flavors select: read with `labels_by_model` (catalog key -> product,
    what `product_labels.configured_product_labels` gives: a caller parsing many nodes reads it
    once), or the platform's `GPU_PRODUCT_LABELS` when None. Its labels kept: NVIDIA's and
    `keep` (the topology levels: where a gang may be placed and where it landed). A node of a
    model in `dra_models` (GPU_DRA_MODELS) offers its GPUs through DRA (`dra_units`), none
    while it is not among `dra_published` (the nodes with ResourceSlices; None: not read)."""
    meta = node.get("metadata", {})
    labels: dict[str, str] = meta.get("labels") or {}
    status = node.get("status", {})
    allocatable = {
        k: _int(v)
        for k, v in (status.get("allocatable") or {}).items()
        if k.startswith("nvidia.com/")
    }
    product = labels.get(PRODUCT_LABEL, "")
    model = product_labels.model_for_product(product, labels_by_model) if product else None
    model_key = model.key if model else ""
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    sharing = labels.get("nvidia.com/gpu.sharing-strategy", "none")
    gpu_count = _int(labels.get("nvidia.com/gpu.count"))
    dra = model_key in dra_models
    name = meta.get("name", "")
    published = dra and (dra_published is None or name in dra_published)
    return NodeInfo(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        gpu_model=model_key,
        gpu_product=product,
        gpu_count=gpu_count,
        gpu_memory_mib=_int(labels.get("nvidia.com/gpu.memory")),
        mig_strategy=(DRA if published else DRA_UNPUBLISHED)
        if dra
        else labels.get("nvidia.com/mig.strategy", ""),
        mig_config=labels.get("nvidia.com/mig.config", ""),
        mig_config_state=labels.get("nvidia.com/mig.config.state", ""),
        sharing_strategy=sharing,
        sharing_replicas=_int(labels.get("nvidia.com/gpu.replicas"), 1) or 1,
        device_plugin_config=labels.get("nvidia.com/device-plugin.config", ""),
        allocatable=allocatable,
        labels={
            k: v for k, v in labels.items() if "nvidia.com/" in k or k in keep or k == TOOLKIT_LABEL
        },
        schedulable=not node.get("spec", {}).get("unschedulable", False),
        ready=conditions.get("Ready") == "True",
        units=(
            (dra_units(model_key, gpu_count) if published else {})
            if dra
            else class_units(model_key, allocatable, sharing, product)
        ),
        health_tainted=any(
            t.get("key") == HEALTH_TAINT_KEY for t in node.get("spec", {}).get("taints") or []
        ),
        taints=sorted({t.get("key", "") for t in node.get("spec", {}).get("taints") or []}),
    )


def unguarded_gpu_nodes(nodes: Iterable, gpu_taint_keys: set[str]) -> dict[str, list[str]]:
    """GPU nodes that do not keep devices from pods not given them, by what is missing: the
    GPU taint (any CPU pod lands there) or the toolkit label (the platform has not said the
    toolkit ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers). Pure: nodes or rows."""
    out: dict[str, list[str]] = {"untainted": [], "toolkit_unsaid": []}
    for node in nodes:
        if not node.gpu_model:
            continue
        if not gpu_taint_keys & set(node.taints or []):
            out["untainted"].append(node.name)
        if (node.labels or {}).get(TOOLKIT_LABEL) != "true":
            out["toolkit_unsaid"].append(node.name)
    return out


def offers_capacity(node: NodeInfo) -> bool:
    """Whether a node's GPUs count in the pools: cordoned, NotReady or health-tainted nodes take
    no new work, so approvals must not count on them."""
    return node.schedulable and node.ready and not node.health_tainted


def pool_capacities(nodes: list[NodeInfo]) -> dict[str, int]:
    """Units per class slug that the nodes counting in the pools offer (`offers_capacity`)."""
    total: Counter = Counter()
    for node in nodes:
        if offers_capacity(node):
            total.update(node.units)
    return dict(total)


@dataclass(frozen=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    node_name: str
    resources: dict[str, int]
    phase: str
    priority_class: str
    started_at: str | None
    devices: tuple[str, ...] = ()  # DRA: the GPU devices its claims were allocated


def published_nodes(slices: Iterable[dict]) -> set[str]:
    """Nodes the NVIDIA driver publishes ResourceSlices for (pure)."""
    return {
        s["spec"]["nodeName"]
        for s in slices
        if (s.get("spec") or {}).get("driver") == dra_devices.DRIVER and s["spec"].get("nodeName")
    }


def claim_devices(claims: Iterable[dict]) -> dict[tuple[str, str], tuple[str, ...]]:
    """(namespace, claim name) -> the NVIDIA driver's devices allocated to it (pure)."""
    out = {}
    for claim in claims:
        meta = claim.get("metadata") or {}
        allocation = (claim.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        devices = tuple(
            r["device"]
            for r in results
            if r.get("driver") == dra_devices.DRIVER and r.get("device")
        )
        if devices:
            out[(meta.get("namespace", ""), meta.get("name", ""))] = devices
    return out


def pod_claim_names(pod: dict) -> list[str]:
    """The ResourceClaims a pod uses: those made from its templates, and shared ones it names."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    names = [
        c["resourceClaimName"]
        for c in status.get("resourceClaimStatuses") or []
        if c.get("resourceClaimName")
    ]
    names += [
        c["resourceClaimName"]
        for c in spec.get("resourceClaims") or []
        if c.get("resourceClaimName")
    ]
    return names


def device_resource(device: str) -> str | None:
    """The device plugin's resource name a DRA device counts as (`gpu-0` -> nvidia.com/gpu,
    `gpu-0-mig-3g40gb-9-4` -> nvidia.com/mig-3g.40gb): metering, the capacity map and outside
    use then count it as the same unit of the same class."""
    profile = dra_devices.device_profile(device)
    if profile is None:
        return None
    return f"{MIG_PREFIX}{profile}" if profile else facts.WHOLE_GPU_RESOURCE


def parse_gpu_pod(
    pod: dict, claims: Mapping[tuple[str, str], tuple[str, ...]] | None = None
) -> PodInfo | None:
    """A bound, live pod's GPU requests (init containers run one at a time: their largest
    request counts, as the scheduler counts it), and the devices its DRA claims were allocated
    (`claims`: `claim_devices`' answer) counted the same way; None when it holds no GPU."""
    spec, status, meta = pod.get("spec", {}), pod.get("status", {}), pod.get("metadata", {})
    if not spec.get("nodeName") or status.get("phase") not in ("Pending", "Running"):
        return None
    if meta.get("deletionTimestamp") and status.get("phase") != "Running":
        return None
    total: Counter = Counter()
    for container in spec.get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            if name.startswith("nvidia.com/"):
                total[name] += _int(value)
    for container in spec.get("initContainers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            if name.startswith("nvidia.com/"):
                total[name] = max(total[name], _int(value))
    devices: list[str] = []
    for name in pod_claim_names(pod) if claims else ():
        for device in (claims or {}).get((meta.get("namespace", ""), name), ()):
            resource = device_resource(device)
            if resource:
                total[resource] += 1
                devices.append(device)
    resources = {k: v for k, v in total.items() if v > 0}
    if not resources:
        return None
    return PodInfo(
        uid=meta.get("uid", ""),
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        node_name=spec["nodeName"],
        resources=resources,
        phase=status["phase"],
        priority_class=spec.get("priorityClassName", ""),
        started_at=status.get("startTime"),
        devices=tuple(devices),
    )
