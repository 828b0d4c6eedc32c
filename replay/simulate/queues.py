"""What the Kueue model holds: ClusterQueues as the portal renders them, their quotas, and
the Workloads queued and admitted in them (pure data; the behaviour is `kueue`'s and
`preemption`'s)."""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

Key = tuple[str, str]  # (flavor, resource name)

_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10,
           "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}  # fmt: skip


def quantity(text: str | int | float) -> float:
    """A Kubernetes quantity (`"4"`, `"500m"`, `"256Gi"`) as a number."""
    s = str(text).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if suffix and s.endswith(suffix):
            return float(s[: -len(suffix)]) * _SUFFIX[suffix]
    return float(s)


@dataclass(frozen=True)
class Quota:
    nominal: float
    borrowing_limit: float | None  # None: may borrow without limit
    lending_limit: float | None  # None: lends all of its nominal

    @property
    def lendable(self) -> float:
        return self.nominal if self.lending_limit is None else min(self.lending_limit, self.nominal)

    @property
    def guaranteed(self) -> float:
        return self.nominal - self.lendable


@dataclass(eq=False)
class Workload:
    """One Job's Workload: a single pod set asking `units` of one resource."""

    name: str
    queue: str
    resource: str
    units: float  # after the Configuration's transformations (`transform`)
    priority: int
    timestamp: float  # the queue order timestamp (creationTimestamp)
    seq: int = 0  # ties after the timestamp: arrival order as the engine draws it
    flavor: str | None = None  # set while admitted
    admitted_at: float | None = None
    running_since: float | None = None  # set by the engine while its pod runs

    def order(self) -> tuple:
        return (-self.priority, self.timestamp, self.seq)


@dataclass(eq=False)
class ClusterQueue:
    name: str
    cohort: str | None
    strategy: str
    quotas: dict[Key, Quota]
    flavors: dict[str, list[str]]  # resource -> flavors that list it, in the queue's order
    within_cluster_queue: str
    reclaim_within_cohort: str
    weight: float = 1.0
    usage: defaultdict[Key, float] = field(default_factory=lambda: defaultdict(float))
    admitted: set[Workload] = field(default_factory=set)
    active: list = field(default_factory=list)  # heap of (order, workload)
    inadmissible: list[Workload] = field(default_factory=list)

    def push(self, w: Workload) -> None:
        heapq.heappush(self.active, (w.order(), id(w), w))


def cluster_queue(manifest: dict) -> ClusterQueue:
    """A ClusterQueue as render produced it (`scheduler.cluster.render.kueue`)."""
    spec = manifest["spec"]
    quotas: dict[Key, Quota] = {}
    flavors: dict[str, list[str]] = {}
    for group in spec.get("resourceGroups", []):
        for flavor in group["flavors"]:
            for r in flavor["resources"]:
                bl, ll = r.get("borrowingLimit"), r.get("lendingLimit")
                quotas[(flavor["name"], r["name"])] = Quota(
                    quantity(r["nominalQuota"]),
                    None if bl is None else quantity(bl),
                    None if ll is None else quantity(ll),
                )
                flavors.setdefault(r["name"], []).append(flavor["name"])
    preemption = spec.get("preemption", {})
    return ClusterQueue(
        name=manifest["metadata"]["name"],
        cohort=spec.get("cohortName") or spec.get("cohort"),
        strategy=spec.get("queueingStrategy", "BestEffortFIFO"),
        quotas=quotas,
        flavors=flavors,
        within_cluster_queue=preemption.get("withinClusterQueue", "Never"),
        reclaim_within_cohort=preemption.get("reclaimWithinCohort", "Never"),
        weight=quantity(spec.get("fairSharing", {}).get("weight", 1)),
    )
