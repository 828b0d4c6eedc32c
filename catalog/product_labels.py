"""The `nvidia.com/gpu.product` label of each GPU model on this platform's nodes.

GPU feature discovery names a product after what the driver reports (`NVIDIA-H100-80GB-HBM3`,
`NVIDIA-H100-PCIe`, ...), which the catalog cannot always guess: the setting
`GPU_PRODUCT_LABELS` (model -> product) overrides it. Everything that maps a model to a product
or back goes through here, so the workloads' nodeSelector, Kueue's ResourceFlavors and the node
inventory always agree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from catalog import facts

# A Kubernetes label value: 63 characters at most, alphanumeric at both ends.
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def read_product_labels(setting: Any) -> tuple[dict[str, str], list[str]]:
    """`GPU_PRODUCT_LABELS` (keyed by catalog key or slug) as catalog key -> product label, and
    what is wrong with it, one line each (pure). A wrong entry is left out of the mapping; the
    system check `scheduler.E003` names it at start-up."""
    if not isinstance(setting, dict):
        return {}, ["it must be a JSON object of model -> product label"]
    labels: dict[str, str] = {}
    problems: list[str] = []
    for key, product in setting.items():
        try:
            model = facts.get_model(str(key)).key
        except facts.UnknownModel as exc:
            problems.append(str(exc).strip('"'))
            continue
        if not isinstance(product, str) or not product or not LABEL_VALUE.match(product):
            problems.append(f"{key}: {product!r} is not a label value")
        elif "-MIG-" in product:
            problems.append(f"{key}: give the product without -MIG-<profile>")
        else:
            labels[model] = product
    # The inventory maps a node's product back to one model: two models cannot share one.
    owners: dict[str, list[str]] = {}
    for model in facts.load_catalog():
        owners.setdefault(facts.product_label(model, labels), []).append(model)
    for product, models in owners.items():
        if len(models) > 1 and set(models) & set(labels):
            problems.append(f"{' and '.join(models)} would both be {product!r}")
    return labels, problems


def configured_product_labels() -> dict[str, str]:
    """Catalog key -> product label, from `GPU_PRODUCT_LABELS`."""
    return read_product_labels(getattr(settings, "GPU_PRODUCT_LABELS", None) or {})[0]


def product_label(model: str) -> str:
    """The product label of a model's nodes (catalog key or slug)."""
    return facts.product_label(model, configured_product_labels())


def model_for_product(
    product: str, labels: Mapping[str, str] | None = None
) -> facts.GpuModel | None:
    """The catalog model whose nodes carry this product label (with `-MIG-<profile>` or not),
    by `labels` (what `configured_product_labels` gives; read from the settings when None)."""
    if labels is None:
        labels = configured_product_labels()
    return facts.model_for_product_label(product, labels)
