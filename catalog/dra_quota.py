"""MIG on demand through Dynamic Resource Allocation (issue 53): what the portal asks of Kueue and
of a team's pods when GPUs are served by NVIDIA's DRA driver with DynamicMIG. Pure: dicts out,
no Django, no cluster. Device facts are catalog/dra_devices.py's.

Entry points:
- `counter_units(model, profile)`: what Kueue charges one device of a profile (or a whole GPU)
  in the quota counter; `slice_quota(model, slices)`: the nominal quota of a grant of N slices;
  `slices_to_admit(model, profile)`: the smallest grant that admits one such device.
- `device_class_mappings()`: Kueue v0.19's Configuration `resources.deviceClassMappings`
  (catalog/dra_devices.py, which the local cluster's Kueue reads too; re-exported here).
- `claim_template(...)` / `claim_template_name(...)`: the ResourceClaimTemplate a workload
  asking for a profile (or a whole GPU) of a model renders; `pod_claim(...)`: the pod's side.
- `check_request(...)`, `check_layout(...)`: refusals as `InvalidInput`, naming what exists.

The quota counter is the driver's `multiprocessors` (SMs). Kueue v0.19 charges a claim request
the largest `consumesCounters[multiprocessors]` of the devices its class and selectors match,
times its count (kueue pkg/dra/counters.go); the portal's selectors narrow to one model and one
profile, so the charge is that profile's SMs. A slice is 1/7 of the GPU's SMs (1/4 on an A30):

    slice_quota(model, N) = ceil(N × SMs of the whole GPU / compute slices)

On an A100 every profile is 14 SMs a compute slice (98 / 7), so N granted slices admit exactly
what N slices hold: seven 1g, a 4g and a 3g, a whole GPU for 7. On an H100 or H200 a slice is
132 / 7 = 18.86 SMs and the profiles do not divide by it: 1g 16, 2g 32, 3g 60, 4g 64,
1g.20gb/1g.35gb (one compute slice, two memory slices) 26, 7g and the whole GPU 132. The
rounding is up, on the grant as a whole (never per device): a multiple of 7 slices is exactly
that many whole GPUs, and any layout one GPU can hold fits the quota of its 7 slices (the
driver's counter set enforces the same sum on the GPU). In between, a grant of N slices admits
up to 18% more 1g/2g/4g than N compute slices (eight 1g on 7 slices: 128 ≤ 132), and a 3g
needs a 4-slice grant (60 > 57), a 1g.20gb a 2-slice one (`slices_to_admit`).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping

from catalog import facts
from catalog.dra_devices import (  # noqa: F401 - the Kueue side, re-exported with the rest
    DRIVER,
    ENV,
    GPU_CLASS,
    LOCAL_CLUSTER_MODELS,
    MIG_CLASS,
    QUOTA_COUNTER,
    QUOTA_RESOURCE,
    RESOURCE_API,
    DraModel,
    NotServed,
    device_class_mappings,
    device_selector,
    dra_model,
    from_env,
    problems,
    product_name_matches,
    served_models,
)
from core.errors import InvalidInput

WHOLE_GPU = "gpu"  # the profile argument that means a whole GPU
CLAIM_NAME = "gpu"  # the pod's name for its claim (spec.resourceClaims[].name)
MAX_NAME = 63  # template names stay DNS-1123 labels, as the portal's other names

# --- the quota counter -----------------------------------------------------------------------


def _served(model: str | facts.GpuModel) -> DraModel:
    """The DRA view of a model, or InvalidInput naming the models DRA serves."""
    served = ", ".join(m.key for m in served_models())
    try:
        return dra_model(model)
    except facts.UnknownModel:
        raise InvalidInput(
            f"unknown GPU model {model!r}; served through DRA: {served}", field="gpu_model"
        ) from None
    except NotServed as exc:
        raise InvalidInput(f"{exc}; served through DRA: {served}", field="gpu_model") from None


def _profile_names(model: DraModel) -> str:
    return ", ".join(model.profiles) + f" or {WHOLE_GPU!r} (a whole GPU)"


def counter_units(model: str | facts.GpuModel, profile: str = WHOLE_GPU) -> int:
    """Multiprocessors Kueue charges for one device of `profile` (or a whole GPU, `"gpu"`)."""
    gpu = _served(model)
    if profile == WHOLE_GPU:
        return gpu.multiprocessors
    if profile not in gpu.profiles:
        raise InvalidInput(
            f"{gpu.key} has no MIG profile {profile!r}; it has {_profile_names(gpu)}",
            field="profile",
        )
    return gpu.profiles[profile].multiprocessors


def slice_quota(model: str | facts.GpuModel, slices: int) -> int:
    """The nominal quota (multiprocessors) of a grant of `slices` compute slices of `model`:
    ceil(slices × whole-GPU SMs / compute slices); exact on an A100 (14 a slice)."""
    if slices < 0:
        raise InvalidInput("slices must be a whole number ≥ 0", field="slices")
    gpu = _served(model)
    return math.ceil(slices * gpu.multiprocessors / gpu.compute_slices)


def slices_to_admit(model: str | facts.GpuModel, profile: str = WHOLE_GPU, count: int = 1) -> int:
    """The smallest grant (in slices) whose quota admits `count` devices of `profile`: the
    profile's compute slices on an A100; more where its SMs exceed its share (an H100's 3g: 4)."""
    units = counter_units(model, profile) * count
    gpu = _served(model)
    n = math.floor(units * gpu.compute_slices / gpu.multiprocessors)
    while slice_quota(gpu.key, n) < units:
        n += 1
    return n


# --- what a workload renders -----------------------------------------------------------------


def check_request(
    model: str | facts.GpuModel,
    profile: str = WHOLE_GPU,
    count: int = 1,
    *,
    gpus_per_node: int | None = None,
) -> DraModel:
    """Refuse (InvalidInput) a profile the model does not have, or a count no node of the model
    could ever hold (with `gpus_per_node`, the most GPUs a node of it has); else the model."""
    gpu = _served(model)
    if profile != WHOLE_GPU and profile not in gpu.profiles:
        raise InvalidInput(
            f"{gpu.key} has no MIG profile {profile!r}; it has {_profile_names(gpu)}",
            field="profile",
        )
    if count < 1:
        raise InvalidInput("count must be a whole number ≥ 1", field="count")
    if gpus_per_node is not None:
        per_gpu = (
            1 if profile == WHOLE_GPU else facts.get_model(gpu.key).profile(profile).max_instances
        )
        if count > per_gpu * gpus_per_node:
            shape = "whole GPUs" if profile == WHOLE_GPU else f"× {profile} ({per_gpu} a GPU)"
            raise InvalidInput(
                f"{count} {shape} cannot be held by one {gpu.key} node: its nodes have at most "
                f"{gpus_per_node} GPUs, room for {per_gpu * gpus_per_node}",
                field="count",
            )
    return gpu


def check_layout(model: str | facts.GpuModel, devices: Mapping[str, int]) -> DraModel:
    """Refuse (InvalidInput) MIG devices that no single GPU of the model could hold at once
    (two 4g, 3g + 3g + 1g), naming the profiles and how many of each one GPU holds."""
    gpu = _served(model)
    unknown = [name for name in devices if name not in gpu.profiles]
    if unknown:
        raise InvalidInput(
            f"{gpu.key} has no MIG profile {unknown[0]!r}; it has {', '.join(gpu.profiles)}",
            field="profile",
        )
    if not facts.can_pack(gpu.key, devices):
        wanted = " + ".join(f"{n} × {name}" for name, n in devices.items() if n)
        most = ", ".join(
            f"{p.max_instances} × {p.name}" for p in facts.get_model(gpu.key).profiles.values()
        )
        raise InvalidInput(
            f"{wanted} cannot be held by one {gpu.key}: its memory slices, placements or compute "
            f"slices do not allow it (one GPU holds at most {most})",
            field="profile",
        )
    return gpu


def claim_template_name(
    model: str | facts.GpuModel, profile: str = WHOLE_GPU, count: int = 1
) -> str:
    """`dra-a100-80gb-mig-3g.40gb`, `dra-h100-80gb-gpu-x2`: deterministic per (model, profile,
    count), DNS-1123, with a short hash when it had to be cut."""
    gpu = facts.get_model(_served(model).key)
    kind = "whole" if profile == WHOLE_GPU else "mig"
    slug = facts.class_slug(gpu, kind, profile) + ("-gpu" if kind == "whole" else "")
    name = f"dra-{slug}" + (f"-x{count}" if count != 1 else "")
    name = re.sub(r"[^a-z0-9.-]", "-", name.lower())
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - 9].rstrip('.-')}-{digest}"
    return name


def claim_selector(
    model: str | facts.GpuModel,
    profile: str = WHOLE_GPU,
    overrides: Mapping[str, str] | None = None,
) -> str:
    """CEL for one device of the model: its product and, for MIG, its profile."""
    gpu = _served(model)
    cel = product_name_matches(facts.product_label(gpu.key, overrides))
    if profile != WHOLE_GPU:
        cel += f" && device.attributes['{DRIVER}'].profile == '{profile}'"
    return cel


def claim_template(
    model: str | facts.GpuModel,
    profile: str = WHOLE_GPU,
    count: int = 1,
    *,
    namespace: str,
    labels: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> dict:
    """The ResourceClaimTemplate (resource.k8s.io/v1) for `count` devices of `profile` (or
    whole GPUs) of `model` on one node: one `exactly` request of the driver's class, selected
    by product and profile (Kueue v0.19 refuses `firstAvailable`, `allocationMode: All`,
    admin access and shared claims). Validated by `check_request` first."""
    gpu = check_request(model, profile, count)
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": claim_template_name(gpu.key, profile, count),
            "namespace": namespace,
            "labels": dict(labels or {}),
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": CLAIM_NAME,
                            "exactly": {
                                "deviceClassName": GPU_CLASS if profile == WHOLE_GPU else MIG_CLASS,
                                "allocationMode": "ExactCount",
                                "count": count,
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": claim_selector(
                                                gpu.key, profile, overrides
                                            )
                                        }
                                    }
                                ],
                            },
                        }
                    ]
                }
            }
        },
    }


def pod_claim(template_name: str, name: str = CLAIM_NAME) -> tuple[dict, dict]:
    """(the pod spec's `resourceClaims` entry, the container's `resources.claims` entry) that
    give a pod the devices of a template, in place of `nvidia.com/...` resources; `name`: the
    claim's name in the pod (a pod of several devices names each: `gpu-0`, `gpu-1`, ...)."""
    return (
        {"name": name, "resourceClaimTemplateName": template_name},
        {"name": name},
    )
