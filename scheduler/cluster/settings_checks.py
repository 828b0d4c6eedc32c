"""Settings the reconciler renders into every namespace, checked when the portal starts: a typo
in a CIDR, a toleration or a quantity would otherwise fail every tenant's reconcile later."""

import ipaddress
import re
from typing import Any

from django.conf import settings
from django.core import checks

from catalog import dra_devices, kueue_integrations, slices
from catalog.product_labels import LABEL_VALUE, read_product_labels
from core.quantities import BadQuantity, parse_quantity
from scheduler.cluster.render.labels import CONTAINER_DEFAULTS


@checks.register(checks.Tags.compatibility)
def check_egress_cidrs(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    for name in ("TENANT_EGRESS_ALLOWED_CIDRS", "TENANT_EGRESS_DENIED_CIDRS"):
        for value in getattr(settings, name, ()):
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                errors.append(
                    checks.Error(
                        f"{name} has {value!r}, which is not a CIDR",
                        hint="write addresses as CIDRs, e.g. 10.0.0.0/8 or 169.254.169.254/32",
                        id="scheduler.E001",
                    )
                )
    return errors


# --- GPU nodes: tolerations and product labels ------------------------------------------------

_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
TOLERATION_FIELDS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
TAINT_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
MAX_FLAVOR_TOLERATIONS = 8  # what Kueue's ResourceFlavor allows


def toleration_problems(tolerations: Any) -> list[str]:
    """What the API server would refuse in a list of tolerations, one line each (pure)."""
    if not isinstance(tolerations, list):
        return ["it must be a JSON list of tolerations"]
    if len(tolerations) > MAX_FLAVOR_TOLERATIONS:
        return [f"a Kueue ResourceFlavor takes at most {MAX_FLAVOR_TOLERATIONS} tolerations"]
    problems = []
    for i, t in enumerate(tolerations):
        if not isinstance(t, dict):
            problems.append(f"#{i}: a toleration is an object, e.g. {{'operator': 'Exists'}}")
            continue
        if unknown := sorted(set(t) - TOLERATION_FIELDS):
            problems.append(f"#{i}: unknown fields {unknown}; use {sorted(TOLERATION_FIELDS)}")
        key, operator = t.get("key", ""), t.get("operator", "Equal")
        value, effect = t.get("value", ""), t.get("effect", "")
        if operator not in ("Exists", "Equal"):
            problems.append(f"#{i}: operator {operator!r} is neither Exists nor Equal")
        if not isinstance(key, str) or (key and not _QUALIFIED_NAME.match(key)):
            problems.append(f"#{i}: key {key!r} is not a label key (e.g. nvidia.com/gpu)")
        elif not key and operator != "Exists":
            problems.append(f"#{i}: without a key the operator must be Exists")
        if operator == "Exists" and value:
            problems.append(f"#{i}: with operator Exists there is no value")
        if not isinstance(value, str) or not LABEL_VALUE.match(value):
            problems.append(f"#{i}: value {value!r} is not a label value")
        if effect not in TAINT_EFFECTS:
            problems.append(f"#{i}: effect {effect!r} is not one of {list(TAINT_EFFECTS[1:])}")
        if "tolerationSeconds" in t and (
            effect != "NoExecute"
            or isinstance(t["tolerationSeconds"], bool)
            or not isinstance(t["tolerationSeconds"], int)
        ):
            problems.append(f"#{i}: tolerationSeconds is a whole number, for NoExecute only")
    return problems


@checks.register(checks.Tags.compatibility)
def check_gpu_node_tolerations(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    value = getattr(settings, "GPU_NODE_TOLERATIONS", [])
    return [
        checks.Error(
            f"GPU_NODE_TOLERATIONS {problem}",
            hint='e.g. [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]',
            id="scheduler.E002",
        )
        for problem in toleration_problems(value)
    ]


def product_label_problems(labels: Any) -> list[str]:
    """What is wrong with `GPU_PRODUCT_LABELS` (model -> product label), one line each."""
    return read_product_labels(labels)[1]


@checks.register(checks.Tags.compatibility)
def check_gpu_product_labels(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    return [
        checks.Error(
            f"GPU_PRODUCT_LABELS: {problem}",
            hint='map catalog models to nvidia.com/gpu.product, e.g. {"H100-80GB": '
            '"NVIDIA-H100-PCIe"}',
            id="scheduler.E003",
        )
        for problem in product_label_problems(getattr(settings, "GPU_PRODUCT_LABELS", {}))
    ]


# --- what one workload may ask for -------------------------------------------------------------


def workload_maxima_problems(values: dict[str, Any]) -> list[str]:
    """The WORKLOAD_MAX_* and TENANT_*_QUOTA quantities: each readable and above zero, and the
    cpu and memory maxima not below the LimitRange's default limits (the API server refuses a
    LimitRange whose default is above its max, and every team namespace would go unreconciled)."""
    problems = []
    for name, value in values.items():
        try:
            amount = parse_quantity(str(value))
        except BadQuantity as exc:
            problems.append(f"{name} {value!r}: {exc}")
            continue
        if amount <= 0:
            problems.append(f"{name} {value!r} must be above zero")
            continue
        resource = {"WORKLOAD_MAX_CPU": "cpu", "WORKLOAD_MAX_MEMORY": "memory"}.get(name)
        default = CONTAINER_DEFAULTS["default"].get(resource or "")
        if default and amount < parse_quantity(default):
            problems.append(
                f"{name} {value!r} is below the namespaces' default {resource} limit {default}"
            )
    return problems


@checks.register(checks.Tags.compatibility)
def check_workload_maxima(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    names = (
        "WORKLOAD_MAX_CPU",
        "WORKLOAD_MAX_MEMORY",
        "WORKLOAD_MAX_EPHEMERAL_STORAGE",
        "TENANT_CPU_QUOTA",
        "TENANT_MEMORY_QUOTA",
        "TENANT_EPHEMERAL_STORAGE_QUOTA",
    )
    values = {name: getattr(settings, name) for name in names if hasattr(settings, name)}
    hint = "a Kubernetes quantity, e.g. 64, 500m, 256Gi"
    errors: list[checks.CheckMessage] = [
        checks.Error(problem, hint=hint, id="scheduler.E004")
        for problem in workload_maxima_problems(values)
    ]
    if getattr(settings, "WORKLOAD_MAX_VOLUMES", 0) < 0:
        errors.append(checks.Error("WORKLOAD_MAX_VOLUMES must be 0 or more", id="scheduler.E004"))
    return errors


@checks.register(checks.Tags.compatibility)
def check_gpu_quota_unit(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    value = getattr(settings, "GPU_QUOTA_UNIT", slices.UNIT_SLICES)
    if value in slices.UNITS:
        return []
    return [
        checks.Error(
            f"GPU_QUOTA_UNIT is {value!r}",
            hint=f"one of {', '.join(slices.UNITS)}",
            id="scheduler.E005",
        )
    ]


@checks.register(checks.Tags.compatibility)
def check_dra_models(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    models = getattr(settings, "GPU_DRA_MODELS", [])
    errors: list[checks.CheckMessage] = [
        checks.Error(f"GPU_DRA_MODELS: {problem}", id="scheduler.E007")
        for problem in dra_devices.problems(models)
    ]
    if models and getattr(settings, "GPU_QUOTA_UNIT", slices.UNIT_SLICES) != slices.UNIT_SLICES:
        errors.append(
            checks.Error(
                "GPU_DRA_MODELS needs GPU_QUOTA_UNIT=slices",
                hint="a DRA model's grant is one quota line of multiprocessors, as slices are",
                id="scheduler.E007",
            )
        )
    return errors


@checks.register(checks.Tags.compatibility)
def check_kueue_integrations(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    names = getattr(settings, "KUEUE_INTEGRATIONS", kueue_integrations.DEFAULT)
    return [
        checks.Error(
            f"KUEUE_INTEGRATIONS: {problem}",
            hint=f"Kueue's names, among {', '.join(kueue_integrations.FRAMEWORKS)}; "
            f"keep {', '.join(kueue_integrations.REQUIRED)}",
            id="scheduler.E006",
        )
        for problem in kueue_integrations.problems(names)
    ]
