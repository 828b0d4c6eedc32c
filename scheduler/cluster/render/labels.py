"""What marks a portal-owned object, shared by every renderer and by the code that lists them.

Every object carries the portal's labels, so that prune and drift checks select exactly what the
portal owns, and an annotation with the hash of its desired content (`_finish`), so a later run
can tell a hand edit (hash the same, content different) from a change of what is granted (hash
different). Kueue's names and labels, the kinds prune looks at and the containers' defaults live
here too: workloads, inventory and the reconciler read them.
"""

from __future__ import annotations

import hashlib
import json

# Kueue's Configuration selects team namespaces by it as much: catalog holds it for both.
from catalog.kueue_config import QUEUE_ENFORCED_LABEL as QUEUE_ENFORCED_LABEL

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-portal"
TENANT_LABEL = "gpu-portal.io/tenant"
# Several portals (a developer's, the test suite's) may share one cluster: each prunes only
# what carries its own instance label.
INSTANCE_LABEL = "gpu-portal.io/instance"
HASH_ANNOTATION = "gpu-portal.io/desired-hash"
DISPLAY_NAME_ANNOTATION = "gpu-portal.io/display-name"
# On a workspace's objects and its run's pods: its Service selects them, and the namespace's
# workspaces NetworkPolicy lets the ingress controller reach only them.
WORKSPACE_LABEL = "gpu-portal.io/workspace"

# A RoleBinding in a tenant namespace that the portal did not render is pruned unless the
# platform team marks it with this label (teams cannot write RoleBindings).
KEEP_BINDING_LABEL = "gpu-portal.io/keep"

# Kueue (kueue.x-k8s.io/v1beta2): Kueue enforces and queues what the portal grants. Tenant
# namespaces carry QUEUE_ENFORCED_LABEL: Kueue manages every Job and Pod there (with or without a
# queue label) and its webhooks select them by it. A team cannot edit its namespace's labels.
KUEUE_API = "kueue.x-k8s.io/v1beta2"
LOCAL_QUEUE = "default"  # the name also makes Kueue label unlabelled jobs and pods with it
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
QUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# A Job's maximum run time in seconds: Kueue copies it into its Workload's
# spec.maximumExecutionTimeSeconds and deactivates the Workload once admitted that long
# (immutable while the Job runs).
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
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
    "ResourceClaimTemplate",
)
# Cluster-scoped kinds that belong to one tenant (labelled with it, pruned with it).
TENANT_CLUSTER_KINDS = ("ClusterQueue",)

# The NoSchedule taint the portal puts on a node whose GPUs are sick (scheduler/health).
HEALTH_TAINT_KEY = "gpu-portal.io/gpu-unhealthy"


def content_hash(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "metadata"}
    meta = manifest.get("metadata", {})
    body["labels"] = meta.get("labels", {})
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def _finish(manifest: dict) -> dict:
    manifest["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = content_hash(manifest)
    return manifest


def object_key(manifest: dict) -> tuple[str, str, str]:
    meta = manifest["metadata"]
    return manifest["kind"], meta.get("namespace", ""), meta["name"]
