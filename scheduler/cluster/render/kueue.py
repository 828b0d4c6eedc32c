"""Kueue's objects: a tenant's ClusterQueue and LocalQueue, and the cluster-wide ResourceFlavors
(one per GPU model, one for cpu, memory and ephemeral storage)."""

from __future__ import annotations

from scheduler.cluster.render.labels import (
    DEFAULT_FLAVOR,
    GPU_PRODUCT_LABEL,
    KUEUE_API,
    LOCAL_QUEUE,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    _finish,
)
from scheduler.cluster.render.specs import FlavorSpec, QueueLine, TenantSpec, _meta


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
            quota: dict = {"name": name, "nominalQuota": str(line.nominal)}
            if line.borrowing_limit is not None:  # none: as much as the cohort leaves idle
                quota["borrowingLimit"] = str(line.borrowing_limit)
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
            # A lender takes its units back by preempting borrowers (or, with a reclaim grace,
            # the portal does, once a borrower has had it); within the team, higher priority
            # work may preempt lower (gpu-high over gpu-low).
            "preemption": {
                "reclaimWithinCohort": "Never" if spec.reclaim_by_portal else "Any",
                "withinClusterQueue": "LowerPriority",
                "borrowWithinCohort": {"policy": "Never"},
            },
            "stopPolicy": "None" if spec.active else "HoldAndDrain",
            # used only when Kueue's Configuration enables fair sharing (the chart and the
            # local cluster do): idle capacity goes to the queue with the lowest weighted share
            "fairSharing": {"weight": spec.fair_share_weight},
        },
    }


def render_local_queue(spec: TenantSpec, namespace: str) -> dict:
    """The queue the team submits to; `Hold` stops new admissions (work already running goes
    on), e.g. while the team is over budget; a suspended team's drains, as its ClusterQueue
    does. Both say so: Kueue evicts from the one whose change it reads first, and a queue
    moving from `Hold` to `None` while the ClusterQueue moves to `HoldAndDrain` left running
    work running on the local cluster."""
    policy = "HoldAndDrain" if not spec.active else "Hold" if spec.queue_held else "None"
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": _meta(spec, LOCAL_QUEUE, namespace),
        "spec": {"clusterQueue": namespace, "stopPolicy": policy},
    }


def render_queues(spec: TenantSpec, namespace: str) -> list[dict]:
    """Always both: every Job and Pod in a tenant namespace goes through its queue (Kueue
    manages them all), so a team without GPU grants still needs one for CPU work."""
    return [
        _finish(render_cluster_queue(spec, namespace)),
        _finish(render_local_queue(spec, namespace)),
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
