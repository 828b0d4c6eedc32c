"""The DRA row's nodes: GPUs published as NVIDIA's DRA driver publishes them with DynamicMIG
(issue 53), and kube-scheduler allocating each pod's claim on them.

Every GPU is a counter set; every MIG placement it could cut, and the whole GPU, is a device
consuming those counters (`catalog.dra_devices`: `placements`, `consumed_counters`). A pod's
claim asks one profile (class `mig.nvidia.com`) or N whole GPUs (`gpu.nvidia.com`); the
scheduler allocates the first device that its GPU's counters still allow: nodes by name (the
real scheduler draws among equally scored nodes; the replay's scheduler model breaks ties by
name too), GPUs by minor, a profile's placements by start (the driver's device names sorted).
No layout is planned, nothing is drained, no rollout: the driver cuts the instance when the pod
starts and the counters are free again when the pod ends.

A model the driver's view cannot be built for from the catalog (`dra_devices.NotServed`: the
default B200-180GB lacks SM counts for 3g, 4g and 7g) is modelled with the catalog's own
placement rule stated as counters (`facts`: one counter per memory slice, compute slices in
place of multiprocessors), which is what the driver's counters admit on every served model
(tests/scheduler/test_dra_pure.py). `counter_source` says which was used.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cache

from catalog import dra_devices, facts
from replay.simulate.scheduler import Node, Pod, Scheduler

COMPUTE_SLICES = (
    "compute-slices"  # the placement rule's counter where the driver's view is not built
)


@dataclass(frozen=True)
class Device:
    """One device of a GPU: a MIG placement (`profile`, `start`) or the whole GPU (None)."""

    profile: str | None
    start: int
    consumes: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class GpuDevices:
    """What the driver publishes for one GPU of a model: its counter set and its devices."""

    source: str  # whose counters: the driver's (catalog.dra_devices) or the placement rule's
    capacity: tuple[tuple[str, int], ...]
    whole: Device
    by_profile: dict[str, tuple[Device, ...]]  # each profile's placements, start ascending


def _memory_slices(start: int, size: int) -> dict[str, int]:
    return {dra_devices.memory_slice_counter(i): 1 for i in range(start, start + size)}


@cache
def gpu_devices(model_key: str) -> GpuDevices:
    """The driver's devices for one GPU of the model, from `catalog.dra_devices` where it
    serves the model, else from the catalog's placement rule (module docstring)."""
    model = facts.get_model(model_key)
    by_profile: dict[str, list[Device]] = {}
    try:
        dra = dra_devices.dra_model(model)
    except dra_devices.NotServed as why:
        whole = {COMPUTE_SLICES: model.compute_slices, **_memory_slices(0, model.memory_slices)}
        for p in model.profiles.values():
            for start in p.placement_starts:
                if start + p.memory_slices > model.memory_slices:
                    continue
                use = {COMPUTE_SLICES: p.compute_slices, **_memory_slices(start, p.memory_slices)}
                by_profile.setdefault(p.name, []).append(
                    Device(p.name, start, tuple(sorted(use.items())))
                )
        source = f"the catalog's placement rule as counters ({why})"
    else:
        whole = dra_devices.consumed_counters(dra, None)
        for placed, start in dra_devices.placements(dra):
            use = dra_devices.consumed_counters(dra, placed, start)
            by_profile.setdefault(placed.name, []).append(
                Device(placed.name, start, tuple(sorted(use.items())))
            )
        source = "the driver's (`catalog.dra_devices`)"
    capacity = tuple(sorted(whole.items()))  # the full GPU consumes the whole counter set
    return GpuDevices(
        source=source,
        capacity=capacity,
        whole=Device(None, 0, capacity),
        by_profile={k: tuple(sorted(v, key=lambda d: d.start)) for k, v in by_profile.items()},
    )


def counter_source(model: facts.GpuModel) -> str:
    return gpu_devices(model.key).source


@dataclass(eq=False)
class CounterSet:
    """One GPU's shared counters and the devices allocated from them."""

    index: int
    capacity: dict[str, int]
    used: Counter = field(default_factory=Counter)
    allocated: list[Device] = field(default_factory=list)

    def allows(self, device: Device) -> bool:
        return all(self.used[c] + n <= self.capacity[c] for c, n in device.consumes)

    def take(self, device: Device) -> None:
        for c, n in device.consumes:
            self.used[c] += n
        self.allocated.append(device)

    def give_back(self, device: Device) -> None:
        for c, n in device.consumes:
            self.used[c] -= n
        self.allocated.remove(device)


@dataclass(eq=False)
class DraNode(Node):
    """A node with no device-plugin resources (allocatable empty): its GPUs are counter sets."""

    counter_sets: list[CounterSet] = field(default_factory=list)


def dra_node(name: str, model: facts.GpuModel, gpus: int) -> DraNode:
    capacity = dict(gpu_devices(model.key).capacity)
    return DraNode(name, {}, counter_sets=[CounterSet(i, dict(capacity)) for i in range(gpus)])


class DraScheduler(Scheduler):
    """kube-scheduler with the DynamicResources plugin: a pod binds to the first node whose
    devices can satisfy its claim, first device first. `resource` is the pod's device-plugin
    name (`nvidia.com/mig-<profile>` or `nvidia.com/gpu`), read back as the claim's profile."""

    def __init__(self, nodes: list[DraNode], model: facts.GpuModel) -> None:
        super().__init__(list(nodes), {})
        self.dra_nodes = sorted(nodes, key=lambda n: n.name)
        self.devices = gpu_devices(model.key)
        self.profile_of = {p.resource_name: p.name for p in model.profiles.values()}
        self.claims: dict[int, list[tuple[CounterSet, Device]]] = {}  # id(pod) -> allocation

    def allocate(self, node: DraNode, pod: Pod) -> list[tuple[CounterSet, Device]] | None:
        """The claim's devices on this node, first fit, or None; nothing is held yet."""
        if node.cordoned:
            return None
        profile = self.profile_of.get(pod.resource)
        if profile is None:  # whole GPUs: `count` full devices, each its whole counter set
            free = [gpu for gpu in node.counter_sets if gpu.allows(self.devices.whole)]
            if len(free) < pod.units:
                return None
            return [(gpu, self.devices.whole) for gpu in free[: pod.units]]
        for gpu in node.counter_sets:
            for device in self.devices.by_profile.get(profile, ()):
                if gpu.allows(device):
                    return [(gpu, device)]
        return None

    def place(self, pod: Pod) -> Node | None:
        for node in self.dra_nodes:
            got = self.allocate(node, pod)
            if got is not None:
                for gpu, device in got:
                    gpu.take(device)
                self.claims[id(pod)] = got
                pod.node = node
                return node
        return None

    def remove(self, pod: Pod) -> None:
        """The pod ended or was evicted: its claim is deallocated, the counters free at once
        (no drain: the driver deletes the instance with the pod)."""
        if pod.node is not None:
            for gpu, device in self.claims.pop(id(pod)):
                gpu.give_back(device)
            pod.node = None
        elif pod in self.unschedulable:
            self.unschedulable.remove(pod)
