"""The devices NVIDIA's DRA driver (`gpu.nvidia.com`) announces for a GPU with DynamicMIG, from the
catalog: pure facts shared by the portal (catalog/dra_quota.py: quota, claim templates), the
local cluster's simulator (localcluster/dra_slices.py: ResourceSlices) and Kueue's
Configuration (`device_class_mappings`, read by both). No Django, no I/O beyond
the catalog's JSON, and nothing of `core`, so the local cluster may import it.

Read in kubernetes-sigs/dra-driver-nvidia-gpu (formerly NVIDIA/k8s-dra-driver-gpu),
cmd/gpu-kubelet-plugin:
- `partitions.go`: one counter set per GPU, `gpu-<minor>-counter-set`, holding per capacity
  dimension the largest value of any MIG profile (`maxCapacities`, nvlib.go) and one counter
  `memory-slice-<i>` = 1 per memory slice; the full GPU consumes all of it, a MIG placement its
  profile's capacities plus the memory slices `[start, start + size)` it occupies.
- `mig.go`: MIG device names `gpu-<minor>-mig-<profile without dots>-<GI profile id>-<start>`
  (RFC 1123: `1g.10gb+me` -> `1g10gb-me`); capacities `multiprocessors`, `copyEngines`,
  `decoders`, `encoders`, `jpegEngines`, `ofaEngines`, `memory` (bytes), as counters in DNS
  form (`copy-engines`, ...); attributes `type` (`mig`), `profile`, `productName`, ...
- nvlib.go: every GPU-instance-wide profile (C == G, `+me` included) at every possible placement.

The catalog has no copy/decoder/encoder/JPEG/OFA engine counts, so only `multiprocessors`,
`memory` and the memory slices are modelled: the placement rule is wholly in the memory slices
(and the multiprocessors), which is what the portal and the simulator need.

Multiprocessors: the catalog's `sm_count`; where a profile has none, the same NVML GPU-instance
profile id on a catalog model with the same whole-GPU SM count (the same chip: an A100-80GB's
1g.20gb is id 15 as an A100-40GB's 1g.10gb, 14 SMs), else the profile it adds media extensions
to (`1g.6gb+me` has `1g.6gb`'s SMs). A model some profile of which is still unknown is not
served through DRA (`dra_model` raises `NotServed`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from catalog import facts

DRIVER = "gpu.nvidia.com"
RESOURCE_API = "resource.k8s.io/v1"
GPU_CLASS = "gpu.nvidia.com"  # DeviceClass of whole GPUs (attribute type == 'gpu')
MIG_CLASS = "mig.nvidia.com"  # DeviceClass of MIG devices (attribute type == 'mig')
VFIO_CLASS = "vfio.gpu.nvidia.com"  # whole GPUs passed through to a VM: the portal never maps it
# The classes Kueue charges (`device_class_mappings`); the queue guard refuses a member's claim
# of any other class of the driver (scheduler/cluster/render/device_guard.py).
MAPPED_CLASSES = (MIG_CLASS, GPU_CLASS)
TYPE_GPU = "gpu"
TYPE_MIG = "mig"
MULTIPROCESSORS = "multiprocessors"
MEMORY = "memory"
MIB = 1024 * 1024
# Kueue's quota resource for DRA-served GPUs: one name, one line per model through the model's
# ResourceFlavor, as the portal's slices (catalog/slices.py) already are.
QUOTA_RESOURCE = "gpu-portal.io/gpu-multiprocessors"
QUOTA_COUNTER = MULTIPROCESSORS
# The setting naming the models the platform serves through DRA (settings GPU_DRA_MODELS), and
# what the local cluster serves so (localcluster/dra_node.py): no seed node is an A100-40GB, so
# the device plugin's models and the DRA one never share a flavor.
ENV = "GPU_DRA_MODELS"
LOCAL_CLUSTER_MODELS: tuple[str, ...] = ("A100-40GB",)


class NotServed(ValueError):
    """The model cannot be described through DRA from the catalog's facts."""


def memory_slice_counter(index: int) -> str:
    """partitions.go `memsliceCounterName`."""
    return f"memory-slice-{index}"


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def gpu_device_name(minor: int) -> str:
    return f"gpu-{minor}"


def mig_device_name(minor: int, profile: str, profile_id: int, start: int) -> str:
    """mig.go `ToCanonicalName`: dots dropped, then RFC 1123 (lower case, other characters '-')."""
    pname = re.sub(r"[^a-z0-9.-]", "-", profile.replace(".", "").lower()).strip("-")
    return f"gpu-{minor}-mig-{pname}-{profile_id}-{start}"


_DEVICE = re.compile(r"^gpu-(\d+)(?:-mig-(.+)-(\d+)-(\d+))?$")


@cache
def _profiles_by_canonical() -> dict[str, str]:
    """A device name's profile part (`3g40gb`, `1g10gb-me`) -> the profile (`3g.40gb`)."""
    out = {}
    for model in facts.load_catalog().values():
        for name in model.profiles:
            out[mig_device_name(0, name, 0, 0).split("-mig-", 1)[1].rsplit("-", 2)[0]] = name
    return out


def device_profile(device: str) -> str | None:
    """The MIG profile a device of the driver is (`gpu-0-mig-3g40gb-9-4` -> `3g.40gb`), "" for
    a whole GPU (`gpu-0`), None for a name the driver does not give."""
    match = _DEVICE.match(device)
    if match is None:
        return None
    if match.group(2) is None:
        return ""
    return _profiles_by_canonical().get(match.group(2))


def device_gpu(device: str) -> str:
    """The GPU a device is on (`gpu-0-mig-3g40gb-9-4` -> `gpu-0`)."""
    match = _DEVICE.match(device)
    return f"gpu-{match.group(1)}" if match else device


@cache
def _raw_profiles() -> dict[str, dict[str, dict]]:
    """model key -> profile name -> the catalog's JSON entry (ids and SM counts facts.py skips)."""
    raw = json.loads(facts.CATALOG_PATH.read_text())
    return {g["model"]: {p["name"]: p for p in g["profiles"]} for g in raw["gpus"]}


def _whole_profile(model: facts.GpuModel) -> facts.MigProfile:
    """The profile spanning every memory slice (7g.80gb, 4g.24gb on an A30)."""
    return max(model.profiles.values(), key=lambda p: (p.memory_slices, p.compute_slices))


def _sm_count(model: facts.GpuModel, name: str) -> int | None:
    raw = _raw_profiles()
    entry = raw[model.key][name]
    if entry.get("sm_count"):
        return int(entry["sm_count"])
    whole = raw[model.key][_whole_profile(model).name].get("sm_count")
    if whole:  # the same chip: same whole-GPU SM count, same GPU-instance profile id
        for other, profiles in raw.items():
            if other == model.key:
                continue
            other_whole = _whole_profile(facts.get_model(other)) if profiles else None
            if other_whole is None or profiles[other_whole.name].get("sm_count") != whole:
                continue
            for p in profiles.values():
                if p["nvidia_smi_profile_id"] == entry["nvidia_smi_profile_id"] and p.get(
                    "sm_count"
                ):
                    return int(p["sm_count"])
    if name.endswith("+me"):
        return _sm_count(model, name.removesuffix("+me"))
    return None


def _lgip_mib(model: facts.GpuModel, name: str) -> int | None:
    raw = _raw_profiles()[model.key]
    gib = raw[name].get("nvidia_smi_lgip_mem_gib")
    if not gib and name.endswith("+me"):  # the memory of the profile it adds media engines to
        gib = raw.get(name.removesuffix("+me"), {}).get("nvidia_smi_lgip_mem_gib")
    return round(float(gib) * 1024) if gib else None


def _memory_mib(model: facts.GpuModel, name: str) -> int:
    """`nvidia-smi mig -lgip`'s memory where the catalog has it; else the whole profile's
    (itself `-lgip`'s or the name's GB) shared out by memory slices, so that the profiles of
    a layout never add up to more than the GPU (the name's GB is rounded up: 6 of 23.5)."""
    own = _lgip_mib(model, name)
    if own is not None:
        return own
    whole = _whole_profile(model)
    whole_mib = _lgip_mib(model, whole.name) or whole.memory_gb * 1024
    return whole_mib * model.profile(name).memory_slices // model.memory_slices


@dataclass(frozen=True)
class DraProfile:
    """One MIG profile as the driver announces it: GPU-instance profile id, multiprocessors,
    memory (MiB, `_memory_mib`),
    and its placements (start memory slice, size)."""

    name: str
    profile_id: int
    compute_slices: int
    memory_slices: int
    multiprocessors: int
    memory_mib: int
    placement_starts: tuple[int, ...]


@dataclass(frozen=True)
class DraModel:
    """A model as the driver announces each of its GPUs."""

    key: str
    product_label: str  # GPU feature discovery's nvidia.com/gpu.product
    memory_slices: int
    compute_slices: int
    profiles: dict[str, DraProfile]

    @property
    def multiprocessors(self) -> int:
        """The counter set's multiprocessors: the largest of any profile (the whole-GPU one)."""
        return max(p.multiprocessors for p in self.profiles.values())

    @property
    def memory_mib(self) -> int:
        return max(p.memory_mib for p in self.profiles.values())


def dra_model(key: str | facts.GpuModel) -> DraModel:
    """The DRA view of a catalog model (key or slug). Raises facts.UnknownModel, or NotServed
    for a model that is not MIG-capable or whose multiprocessors the catalog does not give."""
    model = facts.get_model(key) if isinstance(key, str) else key
    return _dra_model(model.key)


@cache
def _dra_model(key: str) -> DraModel:
    model = facts.get_model(key)
    if not model.mig_capable or not model.profiles:
        raise NotServed(f"{model.key} is not MIG-capable: NVIDIA's driver announces no partitions")
    raw = _raw_profiles()[model.key]
    profiles = {}
    missing = []
    for name, p in model.profiles.items():
        sm = _sm_count(model, name)
        if sm is None:
            missing.append(name)
            continue
        memory_mib = _memory_mib(model, name)
        profiles[name] = DraProfile(
            name=name,
            profile_id=int(raw[name]["nvidia_smi_profile_id"]),
            compute_slices=p.compute_slices,
            memory_slices=p.memory_slices,
            multiprocessors=sm,
            memory_mib=memory_mib,
            placement_starts=p.placement_starts,
        )
    if missing:
        raise NotServed(
            f"the catalog gives no multiprocessor count for {model.key} {', '.join(missing)}"
        )
    return DraModel(
        key=model.key,
        product_label=model.product_label,
        memory_slices=model.memory_slices,
        compute_slices=model.compute_slices,
        profiles=profiles,
    )


def served_models() -> list[DraModel]:
    """Every catalog model the driver's partitions can be described for, in catalog order."""
    out = []
    for model in facts.load_catalog().values():
        try:
            out.append(dra_model(model))
        except NotServed:
            continue
    return out


def placements(model: DraModel) -> list[tuple[DraProfile, int]]:
    """Every (profile, start) the driver announces on one GPU, in the catalog's order."""
    return [
        (p, start)
        for p in model.profiles.values()
        for start in p.placement_starts
        if start + p.memory_slices <= model.memory_slices
    ]


def consumed_counters(
    model: DraModel, profile: DraProfile | None, start: int = 0
) -> dict[str, int]:
    """What a device consumes of its GPU's counter set: {counter: units}, memory in MiB. The full
    GPU (`profile` None) consumes the whole set (partitions.go `PartConsumesCounters`)."""
    if profile is None:
        out = {MULTIPROCESSORS: model.multiprocessors, MEMORY: model.memory_mib}
        slices = range(model.memory_slices)
    else:
        out = {MULTIPROCESSORS: profile.multiprocessors, MEMORY: profile.memory_mib}
        slices = range(start, start + profile.memory_slices)
    out.update({memory_slice_counter(i): 1 for i in slices})
    return out


def product_name_matches(product_label: str) -> str:
    """CEL true for devices of the model whose GFD product label this is. GFD's label is NVML's
    device name with spaces as '-' (`NVIDIA H100 80GB HBM3` -> `NVIDIA-H100-80GB-HBM3`), so the
    driver's `productName` attribute is compared in that form: the catalog keeps the label only."""
    return f"device.attributes['{DRIVER}'].productName.replace(' ', '-') == '{product_label}'"


def simulated_product_name(product_label: str) -> str:
    """A `productName` the simulator publishes for a label: its first '-' as a space
    (`NVIDIA A100-SXM4-80GB`, as NVML names an A100). Matching never depends on the rest, see
    `product_name_matches`."""
    return product_label.replace("-", " ", 1)


# --- Kueue's Configuration -------------------------------------------------------------------


def from_env(environ: Mapping[str, str], default: tuple[str, ...] = ()) -> tuple[str, ...]:
    """GPU_DRA_MODELS as a tuple of catalog keys (comma-separated; unset: `default`)."""
    raw = environ.get(ENV)
    if raw is None:
        return tuple(default)
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def problems(models: Iterable[str]) -> list[str]:
    """Why a GPU_DRA_MODELS value cannot be served (empty: it can): unknown models, models the
    driver's partitions cannot be described for."""
    out = []
    for model in models:
        try:
            dra_model(model)
        except (facts.UnknownModel, NotServed) as exc:
            served = ", ".join(m.key for m in served_models())
            out.append(f"{model}: {exc}; DRA serves {served}")
    return out


def device_selector(models: Iterable[DraModel], overrides: Mapping[str, str] | None = None) -> str:
    """CEL matching the devices of these models (by GFD product label, platform overrides too)."""
    labels = [facts.product_label(m.key, overrides) for m in models]
    return " || ".join(product_name_matches(label) for label in labels)


def device_class_mappings(
    models: Iterable[str] | None = None, overrides: Mapping[str, str] | None = None
) -> list[dict]:
    """Kueue v0.19's `resources.deviceClassMappings` (catalog/kueue_config.py merges it beside
    `transformations`): MIG devices and whole GPUs of the DRA-served models charged in
    multiprocessors, under one resource name. One mapping, one source, because Kueue v0.19
    refuses a DeviceClass under two names with the same counter (pkg/config/validation.go), and
    charges every source of a mapping: a source per model would find no device of its model in
    another model's claim and hold the workload back. Raises facts.UnknownModel or NotServed
    for a model it cannot serve (`problems` says why first)."""
    chosen = served_models() if models is None else [dra_model(m) for m in models]
    return [
        {
            "name": QUOTA_RESOURCE,
            "deviceClassNames": list(MAPPED_CLASSES),
            "sources": [
                {
                    "counter": {
                        "name": QUOTA_COUNTER,
                        "driver": DRIVER,
                        "deviceSelector": {
                            "cel": {"expression": device_selector(chosen, overrides)}
                        },
                    }
                }
            ],
        }
    ]
