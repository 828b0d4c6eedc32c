"""Desired cluster state as plain manifests: pure functions, no I/O, no Django.

`render_tenant(spec)` returns everything one tenant should have in its namespace;
`render_cluster(...)` returns the cluster-wide objects (PriorityClasses). Every object carries
the portal's labels so that prune and drift checks select exactly what the portal owns, and an
annotation with the hash of its desired content, so a later run can tell a hand edit (hash the
same, content different) from a change of what is granted (hash different).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from dataclasses import dataclass, field

from core.images import Spellings
from core.names import namespace_name

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-portal"
TENANT_LABEL = "gpu-portal.io/tenant"
# Several portals (a developer's, the test suite's) may share one cluster: each prunes only
# what carries its own instance label.
INSTANCE_LABEL = "gpu-portal.io/instance"
HASH_ANNOTATION = "gpu-portal.io/desired-hash"
DISPLAY_NAME_ANNOTATION = "gpu-portal.io/display-name"

ROBOT_SERVICE_ACCOUNT = "ci-robot"
GPU_QUOTA = "gpu-portal-quota"
PRIORITY_QUOTA_PREFIX = "gpu-portal-priority-"
LIMIT_RANGE = "gpu-portal-defaults"
NETWORK_POLICY = "gpu-portal-isolation"
# Portal-owned Roles in each tenant namespace. Kubernetes' own `admin` and `edit` would let a
# team rewrite its NetworkPolicy or bind people the portal never granted: owners manage access
# through the portal, so in the cluster owners and members get the same workload rights.
WORKLOAD_ROLE = "gpu-portal-workloads"
VIEW_ROLE = "gpu-portal-view"
ROLE_FOR = {"owner": WORKLOAD_ROLE, "member": WORKLOAD_ROLE, "viewer": VIEW_ROLE}
ROLE_BINDING_PREFIX = "gpu-portal-team-"
# A RoleBinding in a tenant namespace that the portal did not render is pruned unless the
# platform team marks it with this label (teams cannot write RoleBindings).
KEEP_BINDING_LABEL = "gpu-portal.io/keep"

# Kueue (kueue.x-k8s.io/v1beta2): Kueue enforces and queues what the portal grants. Tenant
# namespaces carry QUEUE_ENFORCED_LABEL: Kueue manages every Job and Pod there (with or without a
# queue label) and its webhooks select them by it. A team cannot edit its namespace's labels.
KUEUE_API = "kueue.x-k8s.io/v1beta2"
QUEUE_ENFORCED_LABEL = "gpu-portal.io/queue-enforced"
LOCAL_QUEUE = "default"  # the name also makes Kueue label unlabelled jobs and pods with it
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
QUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
DEFAULT_FLAVOR = "gpu-portal-default"  # cpu, memory and ephemeral storage: no node labels
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by NVIDIA's GPU feature discovery
# What the default flavor covers. Kueue never admits a pod asking for a resource its
# ClusterQueue does not list ("resource ... unavailable in ClusterQueue"), so a workload's
# ephemeral storage needs a line too.
NODE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
# The LimitRange's per-container defaults: a container that names no cpu or memory gets these
# (and the namespace's ResourceQuota, which caps requests.cpu/memory, needs every pod to have
# them). Its maxima (`TenantSpec.container_max`) must not be below `default`.
CONTAINER_DEFAULTS: dict[str, dict[str, str]] = {
    "defaultRequest": {"cpu": "100m", "memory": "256Mi"},
    "default": {"cpu": "2", "memory": "4Gi"},
}

# Namespaced kinds the portal manages inside a tenant namespace (prune looks at these).
NAMESPACED_KINDS = (
    "ServiceAccount",
    "ResourceQuota",
    "LimitRange",
    "Role",
    "RoleBinding",
    "NetworkPolicy",
    "LocalQueue",
)
# Cluster-scoped kinds that belong to one tenant (labelled with it, pruned with it).
TENANT_CLUSTER_KINDS = ("ClusterQueue",)


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
    grants give; it may borrow up to `borrowing_limit` idle units of others in the cohort, and
    lends its own idle units when `lend` (reclaimed by preemption when it needs them)."""

    flavor: str
    resource_name: str
    nominal: int
    borrowing_limit: int = 0
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
    # Kueue: the tenant's ClusterQueue lines (every flavor x GPU resource name), its cohort and
    # whether new work is held (e.g. over budget).
    queue_lines: tuple[QueueLine, ...] = ()
    cohort: str = "gpu-portal"
    queue_held: bool = False


def content_hash(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "metadata"}
    meta = manifest.get("metadata", {})
    body["labels"] = meta.get("labels", {})
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def _finish(manifest: dict) -> dict:
    manifest["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = content_hash(manifest)
    return manifest


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


def _gpu_hard(spec: TenantSpec, cap: int | None = None) -> dict[str, str]:
    """`requests.<name>` for every known GPU resource (zero when nothing is granted, so a
    tenant cannot use what it was not given). Never `limits.`: quota ignores those lines for
    extended resources (see the cluster tests)."""
    hard = {}
    for name in sorted(set(spec.gpu_resource_names) | set(spec.gpu_quota)):
        units = spec.gpu_quota.get(name, 0) if spec.active else 0
        if cap is not None:
            units = min(units, cap)
        hard[f"requests.{name}"] = str(units)
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


_READ = ["get", "list", "watch"]
_WRITE = [*_READ, "create", "update", "patch", "delete", "deletecollection"]


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict:
    return {"apiGroups": groups, "resources": resources, "verbs": list(verbs)}


def role_rules(*, write: bool, pod_exec: bool) -> list[dict]:
    """What a team needs for its workloads, and nothing that changes access (roles, bindings),
    isolation (network policies) or quota (quotas, limit ranges, queues): those are read-only.
    Viewers read the same things, minus secrets, exec and port-forward."""
    verbs = _WRITE if write else _READ
    rules = [
        _rule([""], ["pods", "configmaps", "persistentvolumeclaims", "services"], verbs),
        _rule([""], ["pods/log", "pods/status", "events", "endpoints", "serviceaccounts"], _READ),
        _rule([""], ["resourcequotas", "limitranges"], _READ),
        _rule(["batch"], ["jobs", "cronjobs"], verbs),
        _rule(["apps"], ["deployments", "statefulsets"], verbs),
        _rule(["apps"], ["deployments/scale", "statefulsets/scale"], verbs),
        _rule(["apps"], ["replicasets"], _READ),
        _rule(["autoscaling"], ["horizontalpodautoscalers"], verbs),
        _rule(["policy"], ["poddisruptionbudgets"], _READ),
        _rule(["networking.k8s.io"], ["networkpolicies"], _READ),
        _rule(["kueue.x-k8s.io"], ["workloads", "localqueues"], _READ),
        _rule(["rbac.authorization.k8s.io"], ["roles", "rolebindings"], _READ),
    ]
    if write:
        rules.insert(1, _rule([""], ["secrets"], verbs))  # the team's own, in its namespace
        if pod_exec:
            rules.append(_rule([""], ["pods/exec", "pods/attach", "pods/portforward"], ["create"]))
    return rules


def render_access(spec: TenantSpec, namespace: str) -> list[dict]:
    """The robot's ServiceAccount, the portal's two Roles, and one RoleBinding per portal role
    that has anyone in it."""
    objects: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(spec, ROBOT_SERVICE_ACCOUNT, namespace),
            "automountServiceAccountToken": False,
        }
    ]
    if spec.active:
        for name, write in ((WORKLOAD_ROLE, True), (VIEW_ROLE, False)):
            objects.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": _meta(spec, name, namespace),
                    "rules": role_rules(write=write, pod_exec=spec.pod_exec),
                }
            )
    for role, role_name in ROLE_FOR.items():
        subjects = []
        for m in sorted(spec.members, key=lambda m: (m.is_robot, m.username)):
            if m.role != role:
                continue
            if m.is_robot:
                subjects.append(
                    {
                        "kind": "ServiceAccount",
                        "name": ROBOT_SERVICE_ACCOUNT,
                        "namespace": namespace,
                    }
                )
            else:
                subjects.append(
                    {
                        "kind": "User",
                        "apiGroup": "rbac.authorization.k8s.io",
                        "name": f"{spec.user_prefix}{m.username}",
                    }
                )
        for group, group_role in sorted(spec.provider_groups):
            if group_role == role:
                subjects.append(
                    {
                        "kind": "Group",
                        "apiGroup": "rbac.authorization.k8s.io",
                        "name": f"{spec.group_prefix}{group}",
                    }
                )
        if not subjects or not spec.active:
            continue
        objects.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": _meta(spec, f"{ROLE_BINDING_PREFIX}{role}s", namespace),
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": role_name,
                },
                "subjects": subjects,
            }
        )
    return [_finish(o) for o in objects]


def _names_in(names: list[str]) -> dict:
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": names}
        ]
    }


def egress_blocks(allowed: tuple[str, ...], denied: tuple[str, ...]) -> list[dict]:
    """ipBlocks for the allowed CIDRs, each excepting the denied CIDRs it covers (the API server
    refuses an `except` outside its block, and the families must agree)."""
    blocks = []
    denied_nets = [ipaddress.ip_network(d, strict=False) for d in denied]
    for cidr in allowed:
        net = ipaddress.ip_network(cidr, strict=False)
        excepted = sorted(
            str(d)
            for d in denied_nets
            if d.version == net.version and d.subnet_of(net) and d != net  # type: ignore[arg-type]
        )
        if any(d.version == net.version and net.subnet_of(d) for d in denied_nets):  # type: ignore[arg-type]
            continue  # wholly denied
        block: dict = {"cidr": str(net)}
        if excepted:
            block["except"] = excepted
        blocks.append({"ipBlock": block})
    return blocks


def render_network_policy(spec: TenantSpec, namespace: str) -> dict:
    """Ingress from the team's own and the platform namespace only; egress to DNS, the team's
    own namespace, the portal's web port in the platform namespace and the configured CIDRs.
    Everything else, the cloud metadata address, the API server and the portal's database and
    broker included, is denied (where the CNI enforces NetworkPolicies)."""
    allowed = sorted({namespace, spec.platform_namespace})
    dns_ports = [{"protocol": p, "port": 53} for p in ("UDP", "TCP")]
    egress: list[dict] = [
        {
            "to": [
                {
                    "namespaceSelector": _names_in([spec.dns_namespace]),
                    "podSelector": {"matchLabels": dict(spec.dns_pod_labels)},
                }
            ],
            "ports": dns_ports,
        },
        {"to": [{"namespaceSelector": _names_in([namespace])}]},
        {
            "to": [
                {
                    "namespaceSelector": _names_in([spec.platform_namespace]),
                    "podSelector": {"matchLabels": dict(spec.platform_web_pod_labels)},
                }
            ],
            "ports": [{"protocol": "TCP", "port": spec.platform_web_port}],
        },
    ]
    blocks = egress_blocks(spec.egress_allowed_cidrs, spec.egress_denied_cidrs)
    if blocks:
        egress.append({"to": blocks})
    return _finish(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(spec, NETWORK_POLICY, namespace),
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"namespaceSelector": _names_in(allowed)}]}],
                "egress": egress,
            },
        }
    )


def render_cluster_queue(spec: TenantSpec, namespace: str) -> dict:
    """The tenant's ClusterQueue: nominal quota per (GPU model flavor, resource) from its grants,
    cpu and memory on the default flavor (never borrowed), in the portal's cohort. A suspended
    tenant's queue is drained: nominal zero and `HoldAndDrain` evicts what runs."""
    # Only what the team may use: a flavor or resource it has no quota of and may not borrow
    # is left out (Kueue then never admits work asking for it, as with a zero line), which
    # keeps a queue small on a fleet of many models and profiles.
    usable = [
        line for line in spec.queue_lines if spec.active and (line.nominal or line.borrowing_limit)
    ]
    gpu_names = sorted({line.resource_name for line in usable})
    by_flavor: dict[str, dict[str, QueueLine]] = {}
    for line in usable:
        by_flavor.setdefault(line.flavor, {})[line.resource_name] = line
    gpu_flavors = []
    for flavor in sorted(by_flavor):
        resources = []
        for name in gpu_names:
            line = by_flavor[flavor].get(name) or QueueLine(flavor, name, 0)
            quota: dict = {
                "name": name,
                "nominalQuota": str(line.nominal),
                "borrowingLimit": str(line.borrowing_limit),
            }
            if not line.lend:
                quota["lendingLimit"] = "0"
            resources.append(quota)
        gpu_flavors.append({"name": flavor, "resources": resources})
    node_quota = {"cpu": spec.cpu_quota, "memory": spec.memory_quota}
    if spec.ephemeral_storage_quota:
        node_quota["ephemeral-storage"] = spec.ephemeral_storage_quota
    cpu_memory = {
        "coveredResources": list(node_quota),
        "flavors": [
            {
                "name": DEFAULT_FLAVOR,
                "resources": [
                    {
                        "name": name,
                        "nominalQuota": quota if spec.active else "0",
                        "borrowingLimit": "0",
                        "lendingLimit": "0",
                    }
                    for name, quota in node_quota.items()
                ],
            }
        ],
    }
    groups = [cpu_memory]
    if gpu_flavors:
        groups.append({"coveredResources": gpu_names, "flavors": gpu_flavors})
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": _meta(spec, namespace),
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "cohortName": spec.cohort,
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": groups,
            # A lender takes its units back by preempting borrowers; within the team, higher
            # priority work may preempt lower (gpu-high over gpu-low).
            "preemption": {
                "reclaimWithinCohort": "Any",
                "withinClusterQueue": "LowerPriority",
                "borrowWithinCohort": {"policy": "Never"},
            },
            "stopPolicy": "None" if spec.active else "HoldAndDrain",
        },
    }


def render_local_queue(spec: TenantSpec, namespace: str) -> dict:
    """The queue the team submits to; `Hold` stops new admissions (work already running goes
    on), e.g. while the team is over budget."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": _meta(spec, LOCAL_QUEUE, namespace),
        "spec": {
            "clusterQueue": namespace,
            "stopPolicy": "Hold" if spec.queue_held else "None",
        },
    }


def render_queues(spec: TenantSpec, namespace: str) -> list[dict]:
    """Always both: every Job and Pod in a tenant namespace goes through its queue (Kueue
    manages them all), so a team without GPU grants still needs one for CPU work."""
    return [
        _finish(render_cluster_queue(spec, namespace)),
        _finish(render_local_queue(spec, namespace)),
    ]


def render_tenant(spec: TenantSpec) -> list[dict]:
    """Everything one tenant should have: the Namespace first, then what lives in it."""
    namespace = render_namespace(spec)
    ns = namespace["metadata"]["name"]
    return [
        namespace,
        # the queue first: a pod created in the namespace before its LocalQueue exists gets no
        # queue name and would never be admitted
        *render_queues(spec, ns),
        *render_quotas(spec, ns),
        render_limit_range(spec, ns),
        *render_access(spec, ns),
        render_network_policy(spec, ns),
    ]


def render_flavors(flavors: list[FlavorSpec]) -> list[dict]:
    """One ResourceFlavor per GPU model (pods are placed by GFD's product label) and a
    label-less one for cpu, memory and ephemeral storage.

    GPU nodes are usually tainted (`nvidia.com/gpu:NoSchedule` on GKE, EKS and many GPU Operator
    installs). A flavor's `tolerations` are what Kueue injects into the pods it admits on that
    flavor, so every admitted GPU workload, the portal's and a member's kubectl Job alike, may
    land on the tainted nodes. `nodeTaints` would do the opposite: Kueue would then refuse the
    flavor to a workload that does not already tolerate them, and kubectl work would queue for
    ever. The portal's own pods carry the same tolerations in their templates as well."""
    out = [
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": DEFAULT_FLAVOR, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
            "spec": {},
        }
    ]
    for flavor in sorted(flavors, key=lambda f: f.name):
        body: dict = {"nodeLabels": {GPU_PRODUCT_LABEL: flavor.product_label}}
        if flavor.tolerations:
            body["tolerations"] = [dict(t) for t in flavor.tolerations]
        out.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor.name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
                "spec": body,
            }
        )
    return [_finish(o) for o in out]


def render_workload_priority_classes(classes: list[PriorityClassSpec]) -> list[dict]:
    """Kueue's queue order and preemption follow these (same names and values as the pods')."""
    return [
        _finish(
            {
                "apiVersion": KUEUE_API,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": pc.name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
                "value": pc.value,
                **({"description": pc.description} if pc.description else {}),
            }
        )
        for pc in classes
    ]


def render_priority_classes(classes: list[PriorityClassSpec]) -> list[dict]:
    return [
        _finish(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": pc.name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
                "value": pc.value,  # globalDefault stays unset (false): none is the default
                "preemptionPolicy": pc.preemption_policy,
                # the API server drops an empty description: rendering one would never match
                **({"description": pc.description} if pc.description else {}),
            }
        )
        for pc in classes
    ]


def object_key(manifest: dict) -> tuple[str, str, str]:
    meta = manifest["metadata"]
    return manifest["kind"], meta.get("namespace", ""), meta["name"]


QUEUE_GUARD = "gpu-portal-queue-guard"
# What the queue guard's pod rules look at; it also sees Secrets and Services (rules of theirs).
POD_KINDS = ("Pod", "Job", "CronJob", "Deployment", "ReplicaSet", "StatefulSet")


def _for_pods(expression: str) -> str:
    """CEL: `expression` holds for the kinds that carry pods; other kinds pass."""
    return f"!(request.kind.kind in {_cel_list(POD_KINDS)}) || ({expression})"


def _priority_agrees(meta: str, spec: str) -> str:
    """CEL: the object's Kueue priority label, if any, names its pods' priorityClassName."""
    label = f"'{QUEUE_PRIORITY_LABEL}'"
    return (
        f"(!has({meta}.labels) || !({label} in {meta}.labels) || "
        f"(has({spec}.priorityClassName) && {meta}.labels[{label}] == {spec}.priorityClassName))"
    )


_UPDATE = "request.operation == 'UPDATE'"


def _priority_known(spec: str, old: str, classes: str) -> str:
    """CEL: the pod spec names no priority class, one of the portal's, or the one it had (an
    update that does not change it, e.g. a controller removing a finalizer, is not refused)."""
    return (
        f"(!has({spec}.priorityClassName) || {spec}.priorityClassName in [{classes}] || "
        f"({_UPDATE} && has({old}.priorityClassName) && "
        f"{old}.priorityClassName == {spec}.priorityClassName))"
    )


def _cel_list(values) -> str:
    return "[" + ", ".join(json.dumps(v) for v in sorted(values)) + "]"


def _image_ok(image: str, rules: Spellings) -> str:
    """CEL: `image` (a string expression) is allowed by the allow-list's spellings."""
    terms = [f"{image} in {_cel_list(rules.exact)}"]
    if rules.prefixes:
        terms.append(f"{_cel_list(rules.prefixes)}.exists(p, {image}.startsWith(p))")
    if rules.any_library_short or rules.any_hub_short:
        first = f"{image}.split('/')[0]"
        no_host = f"!({first}.contains('.') || {first}.contains(':') || {first} == 'localhost')"
        terms.append(
            f"!{image}.contains('/')"
            if not rules.any_hub_short
            else f"(!{image}.contains('/') || {no_host})"
        )
    return "(" + " || ".join(terms) + ")"


def _images_allowed(spec: str, old: str, rules: Spellings) -> str:
    """CEL: every image is allowed, or was already there before this update (narrowing the
    allow-list must not refuse the updates controllers make to running pods)."""

    def each(containers: str) -> str:
        before = f"{old}.{containers}"
        kept = f"({_UPDATE} && has({before}) && {before}.exists(o, o.image == c.image))"
        return f"{spec}.{containers}.all(c, {_image_ok('c.image', rules)} || {kept})"

    return f"{each('containers')} && (!has({spec}.initContainers) || {each('initContainers')})"


# The NoSchedule taint the portal puts on a node whose GPUs are sick (scheduler/health).
HEALTH_TAINT_KEY = "gpu-portal.io/gpu-unhealthy"


def _no_health_toleration(spec: str, old: str) -> str:
    """CEL: the pod spec tolerates neither the health taint nor every taint (a key-less
    `Exists`), unless it already did before this update (a running pod's later updates)."""
    bad = (
        f"t.key == '{HEALTH_TAINT_KEY}' || ((!has(t.key) || t.key == '') "
        "&& has(t.operator) && t.operator == 'Exists')"
    )
    kept = f"({_UPDATE} && has({old}.tolerations) && {old}.tolerations.exists(t, {bad}))"
    return f"(!has({spec}.tolerations) || !{spec}.tolerations.exists(t, {bad}) || {kept})"


def _per_kind(rule, template: str) -> str:
    """CEL: `rule(pod spec, its old spec)` for a Pod, a CronJob's job template and any other
    pod template."""
    cron = "spec.jobTemplate.spec.template.spec"
    return (
        f"request.kind.kind == 'Pod' ? {rule('object.spec', 'oldObject.spec')} : "
        f"request.kind.kind == 'CronJob' ? {rule(f'object.{cron}', f'oldObject.{cron}')}"
        f" : {rule(template, template.replace('object.', 'oldObject.', 1))}"
    )


def render_queue_guard(
    trusted_users: tuple[str, ...],
    priority_classes: tuple[str, ...] = (),
    images: Spellings | None = None,
) -> list[dict]:
    """A ValidatingAdmissionPolicy (and its binding) for tenant namespaces that closes what
    Kueue alone leaves open to a team member with `edit`: a pod or pod template naming its node
    (`nodeName` skips both the scheduler and Kueue's flavors), lifting Kueue's scheduling gate
    from a pod, unsuspending a Job Kueue has not admitted, and a priority class that is not the
    portal's (`system-node-critical` would preempt every team; the portal's own classes are
    capped per team by its quotas), and an image the portal's allow-list refuses (`images`,
    the same rule as the submit path's; none when it allows any). Kueue and cluster admins
    (`trusted_users`, `system:masters`) do these things legitimately."""
    trusted = ", ".join(f"'{u}'" for u in sorted(trusted_users))
    classes = ", ".join(f"'{c}'" for c in sorted({"", *priority_classes}))
    gate = "'kueue.x-k8s.io/admission'"
    template = "object.spec.template.spec"
    policy: dict = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": QUEUE_GUARD, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {QUEUE_ENFORCED_LABEL: "true"}},
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                    },
                    {
                        "apiGroups": ["batch", "apps"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [
                            "jobs",
                            "cronjobs",
                            "deployments",
                            "replicasets",
                            "statefulsets",
                        ],
                    },
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["secrets", "services"],
                    },
                ],
            },
            "matchConditions": [
                {
                    "name": "not-trusted",
                    "expression": "!('system:masters' in request.userInfo.groups)"
                    + (f" && !(request.userInfo.username in [{trusted}])" if trusted else ""),
                }
            ],
            "validations": [
                {
                    # On create only: the scheduler's binding sets it later, and every update
                    # of a scheduled pod (a finalizer removed, a label) carries it.
                    "expression": "request.kind.kind != 'Pod' || request.operation != 'CREATE' "
                    "|| !has(object.spec.nodeName) || object.spec.nodeName == ''",
                    "message": "pods in team namespaces may not name a node: submit through "
                    "the team's queue (the portal, or a Job with kueue.x-k8s.io/queue-name: "
                    f"{LOCAL_QUEUE}) and pick the GPU model with nvidia.com/gpu.product",
                },
                {
                    "expression": "request.kind.kind == 'Pod' || request.kind.kind == 'CronJob' "
                    f"|| !has({template}.nodeName) || {template}.nodeName == '' "
                    f"|| ({_UPDATE} && has(oldObject.spec.template.spec.nodeName) "
                    f"&& oldObject.spec.template.spec.nodeName == {template}.nodeName)",
                    "message": "pod templates in team namespaces may not name a node: pick the "
                    "GPU model with nvidia.com/gpu.product and let the team's queue admit it",
                },
                {
                    "expression": "request.kind.kind != 'Pod' || request.operation != 'UPDATE' "
                    "|| !has(oldObject.spec.schedulingGates) "
                    f"|| !oldObject.spec.schedulingGates.exists(g, g.name == {gate}) "
                    "|| (has(object.spec.schedulingGates) "
                    f"&& object.spec.schedulingGates.exists(g, g.name == {gate}))",
                    "message": "only Kueue lifts its scheduling gate: the pod runs when the "
                    "team's queue admits it",
                },
                {
                    "expression": "request.kind.kind != 'Job' || request.operation != 'UPDATE' "
                    "|| !has(oldObject.spec.suspend) || !oldObject.spec.suspend "
                    "|| (has(object.spec.suspend) && object.spec.suspend)",
                    "message": "only Kueue starts a suspended Job: it runs when the team's "
                    "queue admits it",
                },
                {
                    # Kueue orders and preempts by this label; the namespace's quotas cap pods
                    # by their priorityClassName: the two must agree, or a member could queue
                    # at gpu-critical without the critical allowance.
                    "expression": "request.kind.kind == 'CronJob' || (request.kind.kind == 'Pod' ? "
                    + _priority_agrees("object.metadata", "object.spec")
                    + " : ("
                    + _priority_agrees("object.metadata", template)
                    + " && (!has(object.spec.template.metadata) || "
                    + _priority_agrees("object.spec.template.metadata", template)
                    + ")))",
                    "message": f"the {QUEUE_PRIORITY_LABEL} label must name the same priority "
                    "class as the pods' priorityClassName",
                },
                {
                    # A member's pod tolerating the health taint would land on a sick GPU the
                    # portal took out of service.
                    "expression": _per_kind(_no_health_toleration, template),
                    "message": "pods in team namespaces may not tolerate the GPU health taint "
                    f"({HEALTH_TAINT_KEY}) or every taint (a toleration with operator Exists "
                    "and no key): name the taints they tolerate, e.g. nvidia.com/gpu",
                },
                {
                    "expression": _per_kind(
                        lambda spec, old: _priority_known(spec, old, classes), template
                    ),
                    "message": "team namespaces may use only the portal's priority classes ("
                    + ", ".join(sorted(priority_classes))
                    + "), and only those the team was granted",
                },
            ],
        },
    }
    if images is not None and not images.allow_all:
        policy["spec"]["validations"].append(
            {
                "expression": _per_kind(
                    lambda spec, old: _images_allowed(spec, old, images), template
                ),
                "message": "an image is not on the platform's allow-list "
                "(WORKLOAD_IMAGE_ALLOWLIST): use an image under a listed registry or "
                "repository, or ask a platform admin to add yours",
            }
        )
    validations = policy["spec"]["validations"]
    for rule in validations:
        rule["expression"] = _for_pods(rule["expression"])
    validations += [
        {
            # Such a Secret gets a token that never expires and outlives the person's
            # membership; CI authenticates with a portal API token instead.
            "expression": "request.kind.kind != 'Secret' || !has(object.type) "
            "|| object.type != 'kubernetes.io/service-account-token'",
            "message": "team namespaces may not hold ServiceAccount token Secrets (they never "
            "expire): give CI a portal API token instead",
        },
        {
            # externalIPs let a Service intercept traffic to any address (CVE-2020-8554).
            "expression": "request.kind.kind != 'Service' || !has(object.spec.externalIPs) "
            "|| size(object.spec.externalIPs) == 0",
            "message": "Services in team namespaces may not set externalIPs: expose a workload "
            "through the platform's ingress",
        },
    ]
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": QUEUE_GUARD, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": {"policyName": QUEUE_GUARD, "validationActions": ["Deny"]},
    }
    return [_finish(policy), _finish(binding)]
