"""What NVIDIA's DRA driver (`gpu.nvidia.com`) with DynamicMIG publishes for a node: its
ResourceSlices and the DeviceClasses its Helm chart installs, as manifests (resource.k8s.io/v1).

Pure: no Kubernetes client, no Django; device facts from catalog/dra_devices.py (the catalog),
a model's architecture from the fleet (gpu_layout). The simulator is to publish these for a node
labelled for DRA, as the driver's kubelet plugin does (integration left: docs/dra.md).

Layout (dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/driver.go `generateSplitResourceSlices`,
Kubernetes ≥ 1.35): one pool named after the node with G + 1 slices for G GPUs: first one slice
holding every GPU's counter set (`sharedCounters`), then per GPU one slice of its devices (the
full GPU `gpu-<minor>` and every MIG placement it could cut), sorted by name. A counter set holds
the largest multiprocessors and memory of any profile and one `memory-slice-<i>` per memory slice;
a MIG device consumes its profile's and the memory slices of its placement, the full GPU all of
them, so the scheduler allocates only placements that fit together on the GPU.

Where this differs from the driver: slice names are the driver's generateName prefix without the
random suffix (`<index>-gpu.nvidia.com-<node>`) and carry no owner reference to the Node; only
`multiprocessors`, `memory` and memory slices are counted (the catalog has no engine counts);
UUIDs, versions and PCI attributes are simulated.
"""

from __future__ import annotations

import hashlib
from typing import Any

from catalog import dra_devices as dd

from . import gpu_layout

# Simulated driver facts (NVML's on a real node); only their presence matters to selectors.
DRIVER_VERSION = "580.95.5"
CUDA_DRIVER_VERSION = "13.0.0"
CUDA_CAPABILITY = {"ampere": "8.0", "hopper": "9.0", "blackwell": "10.0"}
MAX_COUNTER_SETS = 8  # per ResourceSlice (resource.k8s.io/v1 validation)
MAX_DEVICES_WITH_COUNTERS = 64  # per ResourceSlice whose devices consume counters


def _quantity_mib(mib: int) -> str:
    return f"{mib}Mi"


def _counters(values: dict[str, int]) -> dict[str, dict[str, str]]:
    return {
        name: {"value": _quantity_mib(v) if name == dd.MEMORY else str(v)}
        for name, v in sorted(values.items())
    }


def gpu_uuid(node: str, minor: int) -> str:
    """A stable, UUID-shaped id per (node, GPU), as NVML's `GPU-...`."""
    h = hashlib.sha256(f"{node}/{minor}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _attributes(model: dd.DraModel) -> dict[str, dict[str, str]]:
    """The attributes a full GPU and its MIG devices share (deviceinfo.go, mig.go)."""
    try:
        family = gpu_layout.model_info(model.key).family
    except gpu_layout.LayoutError:
        family = ""
    attrs = {
        "productName": {"string": dd.simulated_product_name(model.product_label)},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": family.capitalize()},
        "driverVersion": {"version": DRIVER_VERSION},
        "cudaDriverVersion": {"version": CUDA_DRIVER_VERSION},
    }
    if family in CUDA_CAPABILITY:
        attrs["cudaComputeCapability"] = {"version": f"{CUDA_CAPABILITY[family]}.0"}
    return attrs


def gpu_devices(model: dd.DraModel, node: str, minor: int) -> list[dict[str, Any]]:
    """The devices of one GPU: the full GPU and every MIG placement, sorted by name."""
    common = _attributes(model)
    uuid = gpu_uuid(node, minor)
    counter_set = dd.counter_set_name(minor)
    whole = dd.consumed_counters(model, None)
    devices = [
        {
            "name": dd.gpu_device_name(minor),
            "attributes": {"type": {"string": dd.TYPE_GPU}, "uuid": {"string": uuid}, **common},
            "capacity": {k: v for k, v in _counters(whole).items() if not k.startswith("memory-")},
            "consumesCounters": [{"counterSet": counter_set, "counters": _counters(whole)}],
        }
    ]
    for profile, start in dd.placements(model):
        used = dd.consumed_counters(model, profile, start)
        attributes: dict[str, dict[str, str]] = {
            "type": {"string": dd.TYPE_MIG},
            "profile": {"string": profile.name},
            "parentUUID": {"string": uuid},
            **common,
        }
        devices.append(
            {
                "name": dd.mig_device_name(minor, profile.name, profile.profile_id, start),
                "attributes": attributes,
                "capacity": {
                    k: v for k, v in _counters(used).items() if not k.startswith("memory-")
                },
                "consumesCounters": [{"counterSet": counter_set, "counters": _counters(used)}],
            }
        )
    if len(devices) > MAX_DEVICES_WITH_COUNTERS:
        raise gpu_layout.LayoutError(
            f"{model.key}: {len(devices)} devices a GPU, more than a ResourceSlice holds"
        )
    return sorted(devices, key=lambda d: d["name"])


def counter_set(model: dd.DraModel, minor: int) -> dict[str, Any]:
    return {
        "name": dd.counter_set_name(minor),
        "counters": _counters(dd.consumed_counters(model, None)),
    }


def slice_name(index: int, count: int, node: str) -> str:
    """The resourceslice controller's generateName (`<index in hex>-<driver>-<owner>-`) without
    the API server's random suffix."""
    width = len(f"{max(count - 1, 0):x}")
    return f"{index:0{width}x}-{dd.DRIVER}-{node}"


def resource_slices(
    node: str, model: str, gpu_count: int, *, generation: int = 1
) -> list[dict[str, Any]]:
    """The ResourceSlices the driver publishes for a node of `gpu_count` GPUs of `model` (a
    catalog key or slug). Raises catalog.dra_devices.NotServed for a model it cannot describe,
    gpu_layout.LayoutError for a count one counters slice cannot hold."""
    gpu = dd.dra_model(model)
    if not 0 < gpu_count <= MAX_COUNTER_SETS:
        raise gpu_layout.LayoutError(
            f"{node}: {gpu_count} GPUs; one counters slice holds 1 to {MAX_COUNTER_SETS}"
        )
    count = gpu_count + 1
    pool = {"name": node, "generation": generation, "resourceSliceCount": count}

    def sliced(index: int, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": dd.RESOURCE_API,
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(index, count, node)},
            "spec": {"driver": dd.DRIVER, "nodeName": node, "pool": dict(pool), **body},
        }

    slices = [sliced(0, {"sharedCounters": [counter_set(gpu, m) for m in range(gpu_count)]})]
    slices += [
        sliced(minor + 1, {"devices": gpu_devices(gpu, node, minor)}) for minor in range(gpu_count)
    ]
    return slices


def device_classes(*, extended_resource_name: bool = True) -> list[dict[str, Any]]:
    """The driver's DeviceClasses (deployments/helm/.../deviceclass-gpu.yaml, -mig.yaml).
    `extended_resource_name=False` leaves out `extendedResourceName: nvidia.com/gpu`: with it,
    Kueue (KueueDRAIntegrationExtendedResource, on in v0.19) treats every `nvidia.com/gpu`
    request as DRA-backed, and one of a class with counter sources as inadmissible, which a
    cluster whose device plugin also serves nvidia.com/gpu must avoid (docs/dra.md)."""

    def cls(name: str, device_type: str) -> dict[str, Any]:
        cel = (
            f"device.driver == '{dd.DRIVER}' && "
            f"device.attributes['{dd.DRIVER}'].type == '{device_type}'"
        )
        return {
            "apiVersion": dd.RESOURCE_API,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": cel}}]},
        }

    gpu = cls(dd.GPU_CLASS, dd.TYPE_GPU)
    if extended_resource_name:
        gpu["spec"]["extendedResourceName"] = gpu_layout.GPU
    return [gpu, cls(dd.MIG_CLASS, dd.TYPE_MIG)]
