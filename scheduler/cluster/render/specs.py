"""What one tenant (and the cluster) should have, as frozen dataclasses the renderers read.

The reconciler builds them from the database (`scheduler.cluster.reconcile.specs`); render
never sees a model. `_meta` is the metadata every object of a tenant carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.cluster.render.labels import (
    CONTAINER_DEFAULTS,
    INSTANCE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    TENANT_LABEL,
)


@dataclass(frozen=True)
class PriorityClassSpec:
    name: str
    value: int
    description: str = ""
    preemption_policy: str = "PreemptLowerPriority"


@dataclass(frozen=True)
class FlavorSpec:
    """A Kueue ResourceFlavor: one GPU model, found on nodes by the label GFD sets."""

    name: str
    product_label: str
    tolerations: tuple[dict, ...] = ()


@dataclass(frozen=True)
class QueueLine:
    """One (flavor, resource) quota of a tenant's ClusterQueue: `nominal` is what its active
    grants give; it may borrow up to `borrowing_limit` idle units of others in the cohort (None:
    as many as they leave idle), and
    lends its own idle units when `lend` (reclaimed by preemption when it needs them)."""

    flavor: str
    resource_name: str
    nominal: int
    borrowing_limit: int | None = 0
    lend: bool = True


@dataclass(frozen=True)
class Member:
    username: str
    role: str  # owner | member | viewer
    is_robot: bool = False


@dataclass(frozen=True)
class TenantSpec:
    slug: str
    name: str
    active: bool
    # resource name -> units granted (summed over classes sharing the name)
    gpu_quota: dict[str, int]
    # every GPU resource name the portal knows: each gets a quota line, zero when not granted
    gpu_resource_names: tuple[str, ...]
    members: tuple[Member, ...] = ()
    allowed_priority_classes: tuple[str, ...] = ()
    all_priority_classes: tuple[str, ...] = ()
    critical_priority_class: str = "gpu-critical"
    critical_units: int = 0
    platform_namespace: str = "gpu-portal-system"
    # The portal's web pods in the platform namespace: the only thing there team pods may reach
    # (its API, e.g. from CI running in the cluster), not its database, broker or workers.
    platform_web_pod_labels: tuple[tuple[str, str], ...] = (
        ("app.kubernetes.io/component", "web"),
        ("app.kubernetes.io/name", "gpu-portal"),
    )
    platform_web_port: int = 8000
    # The ingress controller's namespace, allowed in to workspace servers' port (empty: none).
    workspace_ingress_namespace: str = ""
    # Egress: CIDRs pods may reach besides DNS, their own and the platform namespace, minus the
    # denied ones (cloud metadata, the API server) wherever an allowed CIDR covers them.
    egress_allowed_cidrs: tuple[str, ...] = ()
    egress_denied_cidrs: tuple[str, ...] = ("169.254.169.254/32", "fd00:ec2::254/128")
    dns_namespace: str = "kube-system"
    dns_pod_labels: tuple[tuple[str, str], ...] = (("k8s-app", "kube-dns"),)
    pod_exec: bool = True
    namespace_prefix: str = "tenant-"
    cpu_quota: str = "64"
    memory_quota: str = "256Gi"
    # Kueue's line for ephemeral storage on the default flavor, and the namespace's quota of it;
    # "" lists none (work asking for ephemeral storage is then never admitted).
    ephemeral_storage_quota: str = ""
    pod_quota: int = 200
    # PersistentVolumeClaims: how many, and how much storage they may request in all.
    pvc_quota: int = 50
    storage_quota: str = "10Ti"
    container_defaults: dict[str, dict[str, str]] = field(
        default_factory=lambda: {k: dict(v) for k, v in CONTAINER_DEFAULTS.items()}
    )
    # The most one container may ask for (LimitRange `max`, e.g. {"cpu": "64"}): the settings
    # WORKLOAD_MAX_CPU / WORKLOAD_MAX_MEMORY, which bound the portal's own checks too.
    container_max: dict[str, str] = field(default_factory=dict)
    user_prefix: str = ""
    # Identity-provider groups bound like members: (group, role), named as the API server sees
    # them (group_prefix + group, the `--oidc-groups-prefix` of the same provider).
    provider_groups: tuple[tuple[str, str], ...] = ()
    group_prefix: str = ""
    instance: str = "default"
    # A pool gives borrowers a minimum run time (`reclaim_grace_s`), which Kueue cannot: its
    # queues then never reclaim (`reclaimWithinCohort: Never`) and the portal's controller does
    # (scheduler/workloads/queue/reclaim.py).
    reclaim_by_portal: bool = False
    # Kueue: the tenant's ClusterQueue lines (every flavor x GPU resource name), its cohort and
    # whether new work is held (e.g. over budget).
    queue_lines: tuple[QueueLine, ...] = ()
    cohort: str = "gpu-portal"
    queue_held: bool = False
    # Kueue fair sharing: the team's weight among queues that want more than their nominal
    fair_share_weight: str = "1"
    # (API group, resources) of the Kueue integrations on custom resources that are enabled and
    # whose CRD the cluster serves (JobSets, PyTorchJobs, ...): members may create them
    framework_apis: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # GPU models served through DRA that the team may use: (catalog key, its product label,
    # profile or "gpu") of each device a ResourceClaimTemplate is rendered for (render/claims.py)
    dra_devices: tuple[tuple[str, str, str], ...] = ()
    # A fleet (issue 54): the MultiKueue AdmissionCheck the team's ClusterQueue on the manager
    # carries, so its work is dispatched to a worker ("" : it runs on this cluster).
    dispatch_check: str = ""


def _meta(spec: TenantSpec, name: str, namespace: str | None = None, **extra) -> dict:
    meta: dict = {
        "name": name,
        "labels": {
            MANAGED_BY_LABEL: MANAGED_BY,
            INSTANCE_LABEL: spec.instance,
            TENANT_LABEL: spec.slug,
            **extra.pop("labels", {}),
        },
    }
    if namespace:
        meta["namespace"] = namespace
    meta.update(extra)
    return meta
