"""A tenant's Namespace (restricted pod security, queue-enforced) and what caps it: its
ResourceQuotas (the namespace-wide one and one per priority class) and its LimitRange."""

from __future__ import annotations

from core.names import namespace_name
from scheduler.cluster.render.labels import DISPLAY_NAME_ANNOTATION, QUEUE_ENFORCED_LABEL, _finish
from scheduler.cluster.render.specs import TenantSpec, _meta

GPU_QUOTA = "gpu-portal-quota"
PRIORITY_QUOTA_PREFIX = "gpu-portal-priority-"
LIMIT_RANGE = "gpu-portal-defaults"


def render_namespace(spec: TenantSpec) -> dict:
    ns = namespace_name(spec.slug, spec.namespace_prefix)
    return _finish(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": _meta(
                spec,
                ns,
                labels={
                    QUEUE_ENFORCED_LABEL: "true",
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                    "pod-security.kubernetes.io/warn": "restricted",
                    "pod-security.kubernetes.io/audit": "restricted",
                },
                annotations={DISPLAY_NAME_ANNOTATION: spec.name},
            ),
        }
    )


DEVICES_PER_CLASS = ".deviceclass.resource.k8s.io/devices"


def _gpu_hard(spec: TenantSpec, cap: int | None = None) -> dict[str, str]:
    """`requests.<name>` for every known GPU resource (zero when nothing is granted, so a
    tenant cannot use what it was not given). Never `limits.`: quota ignores those lines for
    extended resources (see the cluster tests)."""
    hard = {}
    for name in sorted(set(spec.gpu_resource_names) | set(spec.gpu_quota)):
        units = spec.gpu_quota.get(name, 0) if spec.active else 0
        if cap is not None:
            units = min(units, cap)
        # DRA: devices of a class are counted by name alone (Kubernetes' ResourceClaimsPerClass)
        hard[name if name.endswith(DEVICES_PER_CLASS) else f"requests.{name}"] = str(units)
    return hard


def render_quotas(spec: TenantSpec, namespace: str) -> list[dict]:
    hard = {
        **_gpu_hard(spec),
        "requests.cpu": spec.cpu_quota if spec.active else "0",
        "requests.memory": spec.memory_quota if spec.active else "0",
        "pods": str(spec.pod_quota if spec.active else 0),
        "persistentvolumeclaims": str(spec.pvc_quota if spec.active else 0),
        "requests.storage": spec.storage_quota if spec.active else "0",
        # Members may write Services (for their own pods), never ones that open the cluster's
        # nodes or cloud load balancers to the outside.
        "services.loadbalancers": "0",
        "services.nodeports": "0",
    }
    if spec.ephemeral_storage_quota:
        hard["requests.ephemeral-storage"] = spec.ephemeral_storage_quota if spec.active else "0"
    quotas = [
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": _meta(spec, GPU_QUOTA, namespace),
            "spec": {"hard": hard},
        }
    ]
    for pc in sorted(spec.all_priority_classes):
        allowed = spec.active and pc in spec.allowed_priority_classes
        if pc == spec.critical_priority_class:
            # Critical work may use GPUs only up to the units granted at that priority.
            pc_hard = _gpu_hard(spec, cap=spec.critical_units if allowed else 0)
            if not allowed:
                pc_hard["pods"] = "0"
        elif allowed:
            continue  # the namespace-wide quota already caps it
        else:
            pc_hard = {"pods": "0"}
        quotas.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": _meta(spec, f"{PRIORITY_QUOTA_PREFIX}{pc}", namespace),
                "spec": {
                    "hard": pc_hard,
                    "scopeSelector": {
                        "matchExpressions": [
                            {"scopeName": "PriorityClass", "operator": "In", "values": [pc]}
                        ]
                    },
                },
            }
        )
    return [_finish(q) for q in quotas]


def render_limit_range(spec: TenantSpec, namespace: str) -> dict:
    """Defaults for containers that name no cpu or memory, and the most one may ask for. A
    resource with a `max` but no default (ephemeral storage) defaults its limit to the max, as
    the API server would, and its request to 0, so a container that names none asks nothing."""
    limits: dict = {"type": "Container", **{k: dict(v) for k, v in spec.container_defaults.items()}}
    if spec.container_max:
        limits["max"] = dict(sorted(spec.container_max.items()))
        for resource, most in spec.container_max.items():
            if resource not in limits.setdefault("default", {}):
                limits["default"][resource] = most
                limits.setdefault("defaultRequest", {})[resource] = "0"
    return _finish(
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": _meta(spec, LIMIT_RANGE, namespace),
            "spec": {"limits": [limits]},
        }
    )
