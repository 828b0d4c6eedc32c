"""How the platform serves each GPU model: NVIDIA's device plugin (extended resources, MIG
layouts rolled out by the MIG manager) or Dynamic Resource Allocation (NVIDIA's DRA driver with
DynamicMIG: ResourceSlices, a MIG placement cut when a pod's claim is allocated). The setting
`GPU_DRA_MODELS` names the DRA models; every other model keeps the device plugin. Everything that
asks which way a model goes reads it here (quota lines, pods, inventory, the layout planner)."""

from __future__ import annotations

from django.conf import settings


def dra_models() -> frozenset[str]:
    """Catalog keys of the models served through DRA."""
    return frozenset(getattr(settings, "GPU_DRA_MODELS", ()) or ())


def through_dra(gpu_model: str) -> bool:
    """Whether `gpu_model` (a catalog key) is served through DRA."""
    return gpu_model in dra_models()
