"""What NVIDIA's MIG manager, device plugin and GPU feature discovery would publish for a node.

Pure functions shared by the fleet (seed nodes) and the simulator (relabelled nodes): from a GPU
model, a GPU count, a mig-parted config and a device-plugin config to the node's extended
resources and labels. Packing facts come from catalog/facts.py (the project's catalog).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from catalog import facts

PACKAGE_DIR = Path(__file__).resolve().parent
# The portal's own configs (what it writes for the GPU operator); the simulator reads the same.
MIG_CONFIG_FILE = facts.CATALOG_PATH.with_name("mig-parted-config.yaml")
DEVICE_PLUGIN_CONFIG_FILE = facts.CATALOG_PATH.with_name("device-plugin-config.yaml")
FLEET_FILE = PACKAGE_DIR / "fleet.yaml"

GPU = "nvidia.com/gpu"
# GPU feature discovery's product label: what the simulator finds GPU nodes by and reads their
# model from (through the catalog), as the portal's inventory does on a real cluster.
LABEL_PRODUCT = "nvidia.com/gpu.product"
# Labelled by earlier versions of the fleet; removed from existing nodes on `up`.
OBSOLETE_LABELS = ("gpu-portal/gpu-model",)
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_MIG_STATE = "nvidia.com/mig.config.state"
LABEL_DP_CONFIG = "nvidia.com/device-plugin.config"
# NVIDIA's device plugin has no state label; ours mirrors nvidia.com/mig.config.state.
LABEL_DP_STATE = "gpu-portal/device-plugin.config.state"
MIG_LABEL_PREFIX = "nvidia.com/mig-"


class LayoutError(ValueError):
    """The requested layout or sharing config cannot be applied to this node."""


@cache
def mig_configs() -> dict[str, list[dict]]:
    raw = yaml.safe_load(MIG_CONFIG_FILE.read_text())
    if raw.get("version") != "v1":
        raise LayoutError(f"{MIG_CONFIG_FILE}: only mig-parted version v1 is understood")
    return raw["mig-configs"]


@cache
def device_plugin_configs() -> dict[str, dict]:
    return yaml.safe_load(DEVICE_PLUGIN_CONFIG_FILE.read_text())


# Configs the portal published as ConfigMaps (label gpu-portal/config); the simulator reads
# them before each change, like the GPU operator reads its ConfigMaps. They add to the files.
_published: dict[str, dict] = {"mig-parted": {}, "device-plugin": {}}


def use_published_configs(mig: dict[str, list[dict]], device_plugin: dict[str, dict]) -> None:
    global _published
    _published = {"mig-parted": dict(mig), "device-plugin": dict(device_plugin)}


def parse_published(config_maps: list[tuple[str, dict[str, str]]]) -> tuple[dict, dict]:
    """(kind, data) of published ConfigMaps -> (mig-parted configs, device-plugin configs)."""
    mig: dict[str, list[dict]] = {}
    dp: dict[str, dict] = {}
    for kind, data in config_maps:
        if kind == "mig-parted":
            for text in data.values():
                raw = yaml.safe_load(text) or {}
                if raw.get("version") == "v1":
                    mig.update(raw.get("mig-configs") or {})
        elif kind == "device-plugin":
            dp.update({name: yaml.safe_load(text) or {} for name, text in data.items()})
    return mig, dp


def all_mig_configs() -> dict[str, list[dict]]:
    return {**mig_configs(), **_published["mig-parted"]}


def all_device_plugin_configs() -> dict[str, dict]:
    return {**device_plugin_configs(), **_published["device-plugin"]}


@cache
def fleet_spec() -> dict:
    return yaml.safe_load(FLEET_FILE.read_text())


@dataclass(frozen=True)
class ModelInfo:
    key: str
    product: str
    memory_mib: int
    mig_capable: bool
    family: str


def model_info(key: str) -> ModelInfo:
    """What GFD reports for a model; its product label is the catalog's, so the portal and the
    simulator read a node's model back from it."""
    models = fleet_spec()["models"]
    if key not in models:
        raise LayoutError(f"GPU model {key!r} is not described in {FLEET_FILE.name}")
    m = models[key]
    return ModelInfo(
        key,
        facts.product_label(key),
        int(m["memoryMiB"]),
        bool(m["migCapable"]),
        m.get("family", ""),
    )


def per_gpu_devices(model: str, gpu_count: int, config_name: str | None) -> list[dict | None]:
    """Per GPU: None when MIG is off, else {profile: count}. Raises LayoutError when invalid."""
    if not config_name:
        return [None] * gpu_count
    configs = all_mig_configs()
    if config_name not in configs:
        raise LayoutError(f"no MIG config named {config_name!r} in {MIG_CONFIG_FILE.name}")
    gpu = facts.get_model(model)
    pci_ids = {p.upper() for p in _pci_ids(model)}
    layout: list[dict | None] = [None] * gpu_count
    matched = False
    for entry in configs[config_name]:
        flt = entry.get("device-filter")
        if flt is not None:
            wanted = {flt.upper()} if isinstance(flt, str) else {f.upper() for f in flt}
            if not wanted & pci_ids:
                continue
        matched = True
        devices = entry.get("devices")
        indices = range(gpu_count) if devices == "all" else devices
        if not isinstance(indices, (range, list)):
            raise LayoutError(f"{config_name}: 'devices' must be 'all' or a list of indices")
        enabled = bool(entry.get("mig-enabled"))
        mig_devices = dict(entry.get("mig-devices") or {})
        if enabled and not gpu.mig_capable:
            raise LayoutError(f"{model} is not MIG-capable")
        if not enabled and mig_devices:
            raise LayoutError(f"{config_name}: mig-devices given with mig-enabled: false")
        for idx in indices:
            if not 0 <= int(idx) < gpu_count:
                raise LayoutError(
                    f"{config_name}: GPU index {idx} does not exist (the node has {gpu_count} GPUs)"
                )
            layout[int(idx)] = mig_devices if enabled else None
    if not matched:
        raise LayoutError(f"MIG config {config_name!r} has no entry for {model}")
    for idx, devices in enumerate(layout):
        if devices is None:
            continue
        try:
            ok = facts.can_pack(gpu, devices)
        except facts.UnknownProfile as exc:
            raise LayoutError(str(exc).strip('"')) from None
        if not ok:
            raise LayoutError(
                f"GPU {idx}: {devices} cannot be placed on one {model} "
                "(memory slices, placement starts, compute slices or max count)"
            )
    return layout


@cache
def _pci_ids(model: str) -> tuple[str, ...]:
    return facts.get_model(model).pci_device_ids


def sharing_of(config_name: str | None) -> tuple[str, dict]:
    """(strategy, config) where strategy is none, time-slicing or mps."""
    if not config_name:
        return "none", {}
    configs = all_device_plugin_configs()
    if config_name not in configs:
        raise LayoutError(
            f"no device plugin config named {config_name!r} in {DEVICE_PLUGIN_CONFIG_FILE.name}"
        )
    cfg = configs[config_name] or {}
    strategy = (cfg.get("flags") or {}).get("migStrategy", "mixed")
    if strategy != "mixed":
        raise LayoutError(f"{config_name}: migStrategy {strategy!r} is not simulated (mixed only)")
    sharing = cfg.get("sharing") or {}
    if "timeSlicing" in sharing and "mps" in sharing:
        raise LayoutError(f"{config_name}: time-slicing and MPS cannot be combined")
    if "timeSlicing" in sharing:
        return "time-slicing", sharing["timeSlicing"]
    if "mps" in sharing:
        return "mps", sharing["mps"]
    return "none", {}


def node_gpu_state(
    model: str, gpu_count: int, mig_config: str | None, dp_config: str | None
) -> tuple[dict[str, int], dict[str, str]]:
    """Extended resources {name: count} and GFD/device-plugin labels for a node.

    Resources follow the device plugin's mixed strategy: whole GPUs as nvidia.com/gpu, MIG
    instances as nvidia.com/mig-<profile>; a sharing config multiplies the listed resources, or
    only the devices an entry names (`devices`: a count or GPU indices; the rest stay as they
    are), as NVIDIA's device plugin does.
    """
    info = model_info(model)
    if mig_config and not info.mig_capable:
        raise LayoutError(f"{model} is not MIG-capable; it cannot take MIG config {mig_config!r}")
    layout = per_gpu_devices(model, gpu_count, mig_config)
    gpu = facts.get_model(model)
    resources: dict[str, int] = {GPU: sum(1 for d in layout if d is None)}
    profile_counts: dict[str, int] = {}
    for devices in layout:
        for name, count in (devices or {}).items():
            if count:
                profile_counts[name] = profile_counts.get(name, 0) + int(count)
    for name, count in profile_counts.items():
        res = gpu.profile(name).resource_name
        resources[res] = resources.get(res, 0) + count

    strategy, sharing = sharing_of(dp_config)
    replicas_of_gpu = 1
    if strategy != "none":
        if strategy == "mps" and profile_counts:
            raise LayoutError("MPS sharing applies to whole GPUs only, not to MIG devices")
        rename = bool(sharing.get("renameByDefault"))
        whole = [i for i, d in enumerate(layout) if d is None]  # GPU indices nvidia.com/gpu has
        shared: dict[str, int] = {}  # advertised name -> replicas, added after every entry
        for res in sharing.get("resources") or []:
            name, replicas = res["name"], int(res["replicas"])
            if replicas < 2:
                raise LayoutError(f"{dp_config}: replicas must be >= 2 (got {replicas})")
            if strategy == "mps" and name != GPU:
                raise LayoutError(f"{dp_config}: MPS can only share {GPU}")
            if name == GPU:
                replicas_of_gpu = replicas
            if not resources.get(name):
                continue
            devices = res.get("devices", "all")
            if name == GPU:
                picked = shared_gpus(devices, whole, dp_config)
                whole = [i for i in whole if i not in picked]  # a GPU is shared once
                count = len(picked)
            else:
                count = _shared_count(devices, resources[name], name, dp_config)
            resources[name] -= count  # the devices not listed stay unshared
            advertised = f"{name}.shared" if rename else name
            shared[advertised] = shared.get(advertised, 0) + count * replicas
        for name, count in shared.items():
            resources[name] = resources.get(name, 0) + count

    resources = {k: v for k, v in resources.items() if v}  # kubelet lists no empty resource
    labels = {
        "nvidia.com/gpu.present": "true",
        LABEL_PRODUCT: info.product,
        "nvidia.com/gpu.family": info.family,
        "nvidia.com/gpu.count": str(gpu_count),
        "nvidia.com/gpu.memory": str(info.memory_mib),
        "nvidia.com/gpu.replicas": str(replicas_of_gpu),
        "nvidia.com/gpu.sharing-strategy": strategy,
        "nvidia.com/mig.capable": str(info.mig_capable).lower(),
        "nvidia.com/mig.strategy": "mixed" if info.mig_capable else "none",
    }
    if dp_config:
        labels[LABEL_DP_CONFIG] = dp_config
    if info.mig_capable and mig_config:
        labels[LABEL_MIG_CONFIG] = mig_config
    for name, count in sorted(profile_counts.items()):
        p = gpu.profile(name)
        base = f"{MIG_LABEL_PREFIX}{p.slug}"
        labels.update(
            {
                f"{base}.count": str(count),
                f"{base}.memory": str(p.memory_gb * 1024),
                f"{base}.slices.gi": str(p.compute_slices),
                f"{base}.slices.ci": str(p.compute_slices),
            }
        )
    return resources, labels


def shared_gpus(devices: object, whole: list[int], config_name: str | None) -> list[int]:
    """The whole GPUs an nvidia.com/gpu sharing entry takes: `all`, a count (the first ones) or
    a list of GPU indices (ints or strings, as NVIDIA's device plugin reads them). UUIDs and MIG
    indices are not simulated."""
    if devices == "all":
        return list(whole)
    if isinstance(devices, int) and not isinstance(devices, bool):
        if not 0 < devices <= len(whole):
            raise LayoutError(f"{config_name}: devices: {devices}, but {len(whole)} whole GPU(s)")
        return whole[:devices]
    if not isinstance(devices, list):
        raise LayoutError(f"{config_name}: 'devices' must be 'all', a count or a list of indices")
    picked = []
    for ref in devices:
        if not str(ref).isdigit():
            raise LayoutError(f"{config_name}: device {ref!r} is not a GPU index (not simulated)")
        if int(ref) not in whole:
            raise LayoutError(f"{config_name}: GPU {ref} is no unshared whole GPU of this node")
        picked.append(int(ref))
    if len(set(picked)) != len(picked):
        raise LayoutError(f"{config_name}: a GPU is listed twice in 'devices'")
    return picked


def _shared_count(devices: object, available: int, name: str, config_name: str | None) -> int:
    """How many devices of a MIG resource an entry shares: `all` or a count (lists of MIG
    indices are not simulated)."""
    if devices == "all":
        return available
    if isinstance(devices, int) and not isinstance(devices, bool) and 0 < devices <= available:
        return devices
    raise LayoutError(f"{config_name}: devices {devices!r} for {name} is not simulated")


def model_of(labels: dict[str, str]) -> str | None:
    """The catalog model of a node, from its product label (None when it names no model the
    catalog knows)."""
    model = facts.model_for_product_label(labels.get(LABEL_PRODUCT) or "")
    return model.key if model else None


def stale_mig_labels(labels: dict[str, str], fresh: dict[str, str]) -> list[str]:
    """Per-profile labels on the node that the new layout no longer has."""
    return [k for k in labels if k.startswith(MIG_LABEL_PREFIX) and k not in fresh]
