"""The `nvidia.com/gpu.product` label of each GPU model on this platform's nodes.

GPU feature discovery names a product after what the driver reports (`NVIDIA-H100-80GB-HBM3`,
`NVIDIA-H100-PCIe`, ...), which the catalog cannot always guess: the setting
`GPU_PRODUCT_LABELS` (model -> product) overrides it. Everything that maps a model to a product
or back goes through here, so the workloads' nodeSelector, Kueue's ResourceFlavors and the node
inventory always agree.
"""

from __future__ import annotations

from django.conf import settings

from scheduler.catalog import facts


def configured_product_labels() -> dict[str, str]:
    """Catalog key -> product label, from `GPU_PRODUCT_LABELS` (keyed by catalog key or slug).
    A model the catalog does not know is left out here; the system check
    `scheduler.E003` names it at start-up."""
    out: dict[str, str] = {}
    for key, product in (getattr(settings, "GPU_PRODUCT_LABELS", None) or {}).items():
        try:
            out[facts.get_model(str(key)).key] = str(product)
        except facts.UnknownModel:
            continue
    return out


def product_label(model: str) -> str:
    """The product label of a model's nodes (catalog key or slug)."""
    return facts.product_label(model, configured_product_labels())


def model_for_product(product: str) -> facts.GpuModel | None:
    """The catalog model whose nodes carry this product label (with `-MIG-<profile>` or not)."""
    return facts.model_for_product_label(product, configured_product_labels())
