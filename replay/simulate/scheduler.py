"""A model of kube-scheduler placing the admitted pods on GPU nodes.

A node offers what its device plugin advertises: per GPU, one `nvidia.com/gpu` (whole), the
instances of its MIG layout (`nvidia.com/mig-<profile>`, mixed strategy), or `replicas`
time-sliced replicas (`nvidia.com/gpu.shared`, the renamed time-slicing config; the sharing
config is per node). The scheduler sees only these counts per node (the device plugin picks
the devices), so a pod fits a node when the node has that many of its resource free; a pod
asking several whole GPUs needs them on one node.

Scoring is `NodeResourcesFit` with `MostAllocated`, the weights read from the local cluster's
own scheduler configuration (`localcluster.components.scheduler_config`): for each scored resource
the node has (kube-scheduler skips resources a node does not have), the share in use after
placing the pod, weighted; the highest score wins, ties to the first node by name. Pods wait
in priority order, then by when they were admitted; an unschedulable pod is retried whenever
a pod leaves a node. Not modelled: scheduler preemption of lower-priority pods (the replay's
pods run under Kueue, which preempts first), CPU and memory (the replay's pods ask none).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cache

from catalog import facts
from catalog.services import catalog_resource_classes
from scheduler.mig import planner


@cache
def _resource_names(model_key: str) -> dict[str, str]:
    model = facts.get_model(model_key)
    return {c["slug"]: c["resource_name"] for c in catalog_resource_classes(model)}


def resource_name(model: facts.GpuModel, slug: str) -> str:
    """The Kubernetes resource a unit of a resource class is advertised as: the catalog's own
    class definition (`catalog_resource_classes`)."""
    return _resource_names(model.key)[slug]


def scoring_weights(config: dict) -> dict[str, float]:
    """Resource -> weight of `MostAllocated` in a KubeSchedulerConfiguration."""
    for profile in config.get("profiles", []):
        for plugin in profile.get("pluginConfig", []):
            strategy = plugin.get("args", {}).get("scoringStrategy", {})
            if plugin.get("name") == "NodeResourcesFit" and strategy.get("type") == "MostAllocated":
                return {r["name"]: float(r.get("weight", 1)) for r in strategy["resources"]}
    raise ValueError("the scheduler configuration has no MostAllocated NodeResourcesFit")


@dataclass(eq=False)
class Gpu:
    """One GPU of a node: its shape and the units of each resource its pods hold. Which GPU a
    pod gets is the device plugin's choice: here the first in index order with the units free
    (the planner's assumption, `scheduler.mig.layouts.assign_tenants`)."""

    index: int
    shape: planner.Shape
    offers: dict[str, int]  # resource -> units
    used: Counter = field(default_factory=Counter)


@dataclass(eq=False)
class Node:
    name: str
    allocatable: dict[str, int]
    used: Counter = field(default_factory=Counter)
    gpus: list[Gpu] = field(default_factory=list)
    cordoned: bool = False  # being re-shaped: no new pod binds here

    def free(self, resource: str) -> int:
        if self.cordoned:
            return 0
        return self.allocatable.get(resource, 0) - self.used[resource]

    def take(self, resource: str, units: int) -> list[tuple[Gpu, int]]:
        """Hold `units` of the resource on this node's GPUs, first GPU first."""
        held = []
        left = units
        for g in self.gpus:
            n = min(left, g.offers.get(resource, 0) - g.used[resource])
            if n > 0:
                g.used[resource] += n
                held.append((g, n))
                left -= n
            if not left:
                break
        self.used[resource] += units
        return held

    def reshape(self, model: facts.GpuModel, index: int, shape: planner.Shape) -> None:
        """An idle GPU takes a new shape (the caller keeps busy GPUs as they are)."""
        g = self.gpus[index]
        assert not +g.used, f"{self.name} GPU {index} is busy"
        for resource, n in g.offers.items():
            self.allocatable[resource] -= n
        g.shape, g.offers = shape, _offers(model, shape)
        for resource, n in g.offers.items():
            self.allocatable[resource] = self.allocatable.get(resource, 0) + n


def _offers(model: facts.GpuModel, shape: planner.Shape) -> dict[str, int]:
    return {resource_name(model, slug): n for slug, n in planner.units_of(model, shape).items()}


def gpu_node(name: str, model: facts.GpuModel, shapes: list[planner.Shape]) -> Node:
    """A node whose GPUs have these shapes (planner shapes: whole, MIG, shared replicas)."""
    allocatable: Counter = Counter()
    gpus = []
    for index, shape in enumerate(shapes):
        offers = _offers(model, shape)
        allocatable.update(offers)
        gpus.append(Gpu(index, shape, offers))
    return Node(name, dict(allocatable), gpus=gpus)


@dataclass(eq=False)
class Pod:
    name: str
    resource: str
    units: int
    priority: int
    queued_at: float
    node: Node | None = None
    held: list[tuple[Gpu, int]] = field(default_factory=list)  # on which GPUs of its node

    def order(self) -> tuple:
        return (-self.priority, self.queued_at, self.name)


class Scheduler:
    def __init__(self, nodes: list[Node], weights: dict[str, float]) -> None:
        self.nodes = sorted(nodes, key=lambda n: n.name)
        self.weights = weights
        self.unschedulable: list[Pod] = []

    def score(self, node: Node, pod: Pod) -> float:
        total = weight_sum = 0.0
        for resource, weight in self.weights.items():
            cap = node.allocatable.get(resource, 0)
            if cap <= 0:
                continue
            used = node.used[resource] + (pod.units if resource == pod.resource else 0)
            total += weight * used / cap
            weight_sum += weight
        return total / weight_sum if weight_sum else 0.0

    def place(self, pod: Pod) -> Node | None:
        """Bind the pod to the best node that fits, or None (it waits)."""
        best, best_score = None, -1.0
        for node in self.nodes:
            if node.free(pod.resource) >= pod.units:
                s = self.score(node, pod)
                if s > best_score:
                    best, best_score = node, s
        if best is not None:
            pod.held = best.take(pod.resource, pod.units)
            pod.node = best
        return best

    def submit(self, pod: Pod) -> bool:
        """A pod Kueue has just admitted: bound now, or set aside until a pod leaves."""
        if self.place(pod) is not None:
            return True
        self.unschedulable.append(pod)
        return False

    def remove(self, pod: Pod) -> None:
        if pod.node is not None:
            pod.node.used[pod.resource] -= pod.units
            for g, n in pod.held:
                g.used[pod.resource] -= n
            pod.node, pod.held = None, []
        elif pod in self.unschedulable:
            self.unschedulable.remove(pod)

    def retry(self) -> list[Pod]:
        """After a pod left a node: the waiting pods, in queue order; those now bound."""
        bound = []
        waiting = sorted(self.unschedulable, key=Pod.order)
        self.unschedulable = []
        for pod in waiting:
            if self.place(pod) is not None:
                bound.append(pod)
            else:
                self.unschedulable.append(pod)
        return bound
