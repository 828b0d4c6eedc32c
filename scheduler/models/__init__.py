from scheduler.models.catalog import Pool, ResourceClass, resource_class_slug
from scheduler.models.inventory import Cluster, Node, PodAllocation
from scheduler.models.planning import MigConfig, Plan
from scheduler.models.sync import ReconcileRun, TenantSyncState
from scheduler.models.workloads import Workload, WorkloadEvent

__all__ = [
    "Cluster",
    "MigConfig",
    "Node",
    "Plan",
    "PodAllocation",
    "Pool",
    "ReconcileRun",
    "ResourceClass",
    "TenantSyncState",
    "Workload",
    "WorkloadEvent",
    "resource_class_slug",
]
