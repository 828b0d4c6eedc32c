"""GPUs used outside the portal, and the pools' capacity without them (pure).

A node's allocatable counts every device, also those that pods of no team hold: a platform's
own model serving, a team not yet onboarded. Approvals that counted on those would grant GPUs
already in use, so a pool's capacity is what the nodes offer less what such pods hold.

Outside means a namespace that is neither a team's (labelled with the tenant label, whichever
portal's) nor one of the platform's system namespaces: the GPU operator's validators hold a GPU
for seconds whenever a node starts or is re-shaped, and shrinking the pools (an audit event, an
ask refused) each time would be noise, not capacity lost.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from scheduler.cluster.node_offers import (
    NodeInfo,
    PodInfo,
    class_units,
    offers_capacity,
    pool_capacities,
)

# Kubernetes' own, whatever the settings name besides it.
KUBE_SYSTEM = "kube-system"


def is_outside(
    namespace: str, tenant_namespaces: Collection[str], system_namespaces: Collection[str]
) -> bool:
    return namespace not in tenant_namespaces and namespace not in system_namespaces


def held_outside(
    pods: Iterable[PodInfo],
    nodes: Iterable[NodeInfo],
    *,
    tenant_namespaces: Collection[str],
    system_namespaces: Collection[str],
) -> dict[str, dict[str, int]]:
    """class slug -> namespace -> units that pods outside hold. A pod's GPU resources are read
    as its node offers them (a `nvidia.com/gpu` of a time-sliced node is a shared replica, of a
    MIG `single` node its profile). Pods on nodes that add nothing to the pools are left out:
    what they hold was never counted."""
    counted = {n.name: n for n in nodes if n.gpu_model and offers_capacity(n)}
    out: dict[str, Counter] = defaultdict(Counter)
    for pod in pods:
        node = counted.get(pod.node_name)
        if node is None or not is_outside(pod.namespace, tenant_namespaces, system_namespaces):
            continue
        units = class_units(node.gpu_model, pod.resources, node.sharing_strategy, node.gpu_product)
        for slug, n in units.items():
            out[slug][pod.namespace] += n
    return {slug: dict(sorted(by_ns.items())) for slug, by_ns in out.items()}


@dataclass(frozen=True)
class PoolSize:
    """One pool as the nodes size it: what they offer, and who outside holds part of it."""

    offered: int
    outside: dict[str, int] = field(default_factory=dict)  # namespace -> units

    @property
    def outside_units(self) -> int:
        """Units taken from the pool: never more than the nodes offer."""
        return min(self.offered, sum(self.outside.values()))

    @property
    def capacity(self) -> int:
        return self.offered - self.outside_units


def pool_sizes(
    nodes: list[NodeInfo],
    pods: Iterable[PodInfo],
    *,
    tenant_namespaces: Collection[str],
    system_namespaces: Collection[str],
) -> dict[str, PoolSize]:
    """class slug -> its size: every class the nodes offer or pods outside hold."""
    offered = pool_capacities(nodes)
    outside = held_outside(
        pods, nodes, tenant_namespaces=tenant_namespaces, system_namespaces=system_namespaces
    )
    return {
        slug: PoolSize(offered.get(slug, 0), outside.get(slug, {}))
        for slug in sorted(offered.keys() | outside.keys())
    }
