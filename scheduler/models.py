"""Django finds an app's models here; each lives with its concept (catalog, cluster, mig,
workloads). Import a model from its own module, not from here: that keeps the layers honest."""

from catalog.models import Pool, ResourceClass
from scheduler.cluster.models import Cluster, Node, PodAllocation, ReconcileRun, TenantSyncState
from scheduler.health.models import HealthEvent, HealthImpact, HealthRule, NodeHealth
from scheduler.mig.models import DevicePluginConfig, MigConfig, Plan
from scheduler.workloads.models import Workload, WorkloadEvent, WorkloadSyncState

__all__ = [
    "Cluster",
    "DevicePluginConfig",
    "HealthEvent",
    "HealthImpact",
    "HealthRule",
    "MigConfig",
    "Node",
    "NodeHealth",
    "Plan",
    "PodAllocation",
    "Pool",
    "ReconcileRun",
    "ResourceClass",
    "TenantSyncState",
    "Workload",
    "WorkloadEvent",
    "WorkloadSyncState",
]
