"""A model of Kueue's admission (v0.17 semantics, flat cohort), built from the ClusterQueue and
WorkloadPriorityClass manifests the portal renders: nothing here restates a limit.

What is modelled, and where Kueue documents it:
- quota per (flavor, resource): `nominalQuota`, `borrowingLimit` (absent: unlimited),
  `lendingLimit` (absent: all of the nominal is lent); a queue may use its guaranteed part
  (nominal − lending limit) plus what the cohort's lent pool has left, never more than
  nominal + borrowing limit (`concepts/cluster_queue.md`, "Borrowing/Lending limits");
- flavors tried in the order the queue lists them; the first that fits wins, and with the
  default `whenCanBorrow: Borrow` one that fits by borrowing also wins;
- queues: `BestEffortFIFO` (a head that does not fit is set aside as inadmissible until quota
  is released in the cohort; the next one is tried) and `StrictFIFO` (the head blocks);
  order within a queue: higher priority first, then the older queue timestamp;
- one admission cycle takes one head per ClusterQueue and handles them in Kueue's entry
  order: those that need no borrowing first, then higher priority, then older;
- classic preemption: `withinClusterQueue: LowerPriority` (lower-priority work of the same
  queue), `reclaimWithinCohort: Any | LowerPriority` (work of queues that borrow, when the
  preemptor then fits within its own nominal quota); candidates in other queues first, lower
  priority first, the most recently admitted first; the fewest that make room; the preemptor
  takes its victims' quota at once (`concepts/preemption.md`);
- `resources.transformations` in the Kueue Configuration (strategy `Replace`): a request of an
  input resource counts as `multiplier` × its quantity of each output resource, and only the
  outputs are accounted against quota (`transform`; the portal configures none: row f's
  what-if);
- fair sharing, when the Kueue Configuration has a `fairSharing` block (the portal's has
  none): heads ordered by their queue's dominant resource share, lowest first, and a queue
  reclaims only from queues whose share stays above its own (`LessThanOrEqualToFinalShare`).

Not modelled: hierarchical cohorts and Cohort objects' own quota, admission checks,
`borrowWithinCohort` (the portal renders `Never`), partial admission, resources other than
those a workload asks for (the replay's pods ask GPUs only).
"""

from __future__ import annotations

import heapq
import math
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


Transformations = dict[str, dict[str, float]]  # input resource -> {output resource: multiplier}


def transform(resource: str, units: float, transformations: Transformations) -> tuple[str, float]:
    """A request as quota sees it after the Configuration's `resources.transformations`
    (`Replace`: the input is dropped); one output per input is all the simulator needs."""
    outputs = transformations.get(resource)
    if not outputs:
        return resource, units
    if len(outputs) != 1:
        raise ValueError(f"{resource}: one output resource per input is modelled")
    ((name, multiplier),) = outputs.items()
    return name, units * multiplier


def priorities(manifests: list[dict]) -> dict[str, int]:
    """WorkloadPriorityClass name -> value, from the rendered manifests."""
    return {m["metadata"]["name"]: int(m["value"]) for m in manifests}


@dataclass
class Decision:
    admitted: list[Workload] = field(default_factory=list)
    preempted: list[Workload] = field(default_factory=list)


class Kueue:
    """The ClusterQueues of one cohort (or several) and their workloads."""

    def __init__(self, queues: list[ClusterQueue], *, fair_sharing: bool = False) -> None:
        self.queues = {q.name: q for q in queues}
        self.fair_sharing = fair_sharing
        self.members: dict[str | None, list[ClusterQueue]] = {}
        for q in queues:
            self.members.setdefault(q.cohort, []).append(q)

    # --- quota arithmetic -------------------------------------------------------------------

    def _peers(self, q: ClusterQueue) -> list[ClusterQueue]:
        return self.members[q.cohort] if q.cohort else [q]

    def pool_left(self, q: ClusterQueue, key: Key) -> float:
        """What the cohort's lent pool of `key` has left: Σ lendable − Σ use above guaranteed."""
        if not q.cohort:
            return 0.0
        lent = used = 0.0
        for m in self._peers(q):
            mq = m.quotas.get(key)
            if mq is None:
                continue
            lent += mq.lendable
            used += max(0.0, m.usage[key] - mq.guaranteed)
        return lent - used

    def available(self, q: ClusterQueue, key: Key) -> float:
        """What `q` may still take of `key` now."""
        quota = q.quotas.get(key)
        if quota is None:
            return 0.0
        used = q.usage[key]
        if not q.cohort:
            return quota.nominal - used
        left = max(0.0, quota.guaranteed - used) + self.pool_left(q, key)
        if quota.borrowing_limit is not None:
            left = min(left, quota.nominal + quota.borrowing_limit - used)
        return left

    def borrowing(self, q: ClusterQueue, key: Key, extra: float = 0) -> bool:
        quota = q.quotas.get(key)
        return quota is not None and q.usage[key] + extra > quota.nominal

    def can_ever_fit(self, q: ClusterQueue, resource: str, units: float) -> bool:
        """The portal's admission rule (`submit_workload`'s `_check_fits`), read off the
        rendered queue: refuse what exceeds nominal + borrowing limit on every flavor."""
        for flavor in q.flavors.get(resource, []):
            quota = q.quotas[(flavor, resource)]
            cap = math.inf if quota.borrowing_limit is None else quota.borrowing_limit
            if units <= quota.nominal + cap:
                return True
        return False

    def assign(self, w: Workload) -> str | None:
        """The first flavor that fits, by Kueue's flavor order (borrowing allowed)."""
        q = self.queues[w.queue]
        for flavor in q.flavors.get(w.resource, []):
            if self.available(q, (flavor, w.resource)) >= w.units:
                return flavor
        return None

    def share(self, q: ClusterQueue, extra: Key | None = None, units: float = 0) -> float:
        """Dominant resource share (fair sharing): the largest borrowed fraction of the
        cohort's lendable pool over the queue's resources, divided by its weight."""
        best = 0.0
        for key, quota in q.quotas.items():
            use = q.usage[key] + (units if key == extra else 0)
            borrowed = max(0.0, use - quota.nominal)
            pool = sum(m.quotas[key].lendable for m in self._peers(q) if key in m.quotas)
            if borrowed and pool:
                best = max(best, borrowed / pool)
        return best / q.weight

    # --- workloads --------------------------------------------------------------------------

    def submit(self, w: Workload) -> None:
        self.queues[w.queue].push(w)

    def admit(self, w: Workload, flavor: str, now: float) -> None:
        q = self.queues[w.queue]
        w.flavor, w.admitted_at = flavor, now
        q.usage[(flavor, w.resource)] += w.units
        q.admitted.add(w)

    def release(self, w: Workload) -> None:
        """A finished or evicted workload gives its quota back."""
        q = self.queues[w.queue]
        if w in q.admitted:
            q.admitted.discard(w)
            assert w.flavor is not None
            q.usage[(w.flavor, w.resource)] -= w.units
        w.flavor = w.admitted_at = None

    def requeue_inadmissible(self, cohort: str | None = None) -> None:
        """Quota was released: every set-aside workload of the cohort is tried again."""
        for q in self.queues.values():
            if cohort is None or q.cohort == cohort:
                for w in q.inadmissible:
                    q.push(w)
                q.inadmissible.clear()

    def pending(self) -> int:
        """Workloads queued or set aside (not those waiting for their victims)."""
        return sum(len(q.active) + len(q.inadmissible) for q in self.queues.values())

    # --- preemption -------------------------------------------------------------------------

    def victims(self, w: Workload) -> list[Workload] | None:
        """Kueue's classic preemption for `w`: the fewest admitted workloads whose removal
        lets it fit, or None."""
        q = self.queues[w.queue]
        for flavor in q.flavors.get(w.resource, []):
            found = self._victims_on(w, q, (flavor, w.resource))
            if found:
                return found
        return None

    def _victims_on(self, w: Workload, q: ClusterQueue, key: Key) -> list[Workload] | None:
        quota = q.quotas[key]
        within_nominal = q.usage[key] + w.units <= quota.nominal
        candidates: list[Workload] = []
        if q.within_cluster_queue in ("LowerPriority", "LowerOrNewerEqualPriority"):
            candidates += [
                v for v in q.admitted if v.flavor == key[0] and v.resource == key[1]
                and (v.priority < w.priority or (
                    q.within_cluster_queue == "LowerOrNewerEqualPriority"
                    and v.priority == w.priority and v.timestamp > w.timestamp))
            ]  # fmt: skip
        reclaim = q.reclaim_within_cohort
        if q.cohort and reclaim != "Never" and within_nominal:
            for m in self._peers(q):
                if m is q or not self.borrowing(m, key):
                    continue
                for v in m.admitted:
                    if v.flavor != key[0] or v.resource != key[1]:
                        continue
                    if reclaim == "LowerPriority" and v.priority >= w.priority:
                        continue
                    if self.fair_sharing and self.share(m) <= self.share(q, key, w.units):
                        continue  # fair sharing: only from queues above the preemptor's share
                    candidates.append(v)
        if not candidates:
            return None
        candidates.sort(
            key=lambda v: (v.queue == q.name, v.priority, -(v.admitted_at or 0.0), v.seq)
        )
        removed: list[Workload] = []
        for v in candidates:
            vq = self.queues[v.queue]
            if vq is not q and not self.borrowing(vq, key):
                continue  # that queue is back within its nominal: no longer reclaimable
            self._take(v, key, -1)
            removed.append(v)
            if self._fits(q, key, w.units):
                break
        else:
            for v in removed:
                self._take(v, key, +1)
            return None
        # Put back whatever is not needed, most recently removed first.
        for v in reversed(removed[:-1]):
            self._take(v, key, +1)
            if not self._fits(q, key, w.units):
                self._take(v, key, -1)
            else:
                removed.remove(v)
        for v in removed:
            self._take(v, key, +1)  # the engine evicts them for real
        return removed

    def _take(self, v: Workload, key: Key, sign: int) -> None:
        self.queues[v.queue].usage[key] += sign * v.units

    def _fits(self, q: ClusterQueue, key: Key, units: float) -> bool:
        return self.available(q, key) >= units

    # --- the admission cycle ----------------------------------------------------------------

    def _heads(self) -> list[Workload]:
        heads = []
        for q in self.queues.values():
            if q.active:
                heads.append(heapq.heappop(q.active)[2])
        return heads

    def _entry_order(self, w: Workload) -> tuple:
        q = self.queues[w.queue]
        flavor = self.assign(w)
        borrows = flavor is not None and self.borrowing(q, (flavor, w.resource), w.units)
        if self.fair_sharing:
            key = (flavor, w.resource) if flavor else None
            return (self.share(q, key, w.units), *w.order())
        return (borrows, *w.order())

    def cycle(self, now: float) -> Decision:
        """One scheduling cycle: one head per ClusterQueue. Admits what fits, or what fits
        once the lowest-ranked victims are preempted (returned too)."""
        out = Decision()
        for w in sorted(self._heads(), key=self._entry_order):
            q = self.queues[w.queue]
            flavor = self.assign(w)
            if flavor is not None:
                self.admit(w, flavor, now)
                out.admitted.append(w)
                continue
            found = self.victims(w)
            if found:
                # The victims' quota goes to the preemptor at once: in Kueue it is admitted in
                # the first cycle after they are evicted, and keeps retrying (ahead of the
                # set-aside workloads) until then; taking it now keeps a second preemptor
                # from counting the same room. Their pods still hold their nodes until the
                # engine's release latency has passed.
                for v in found:
                    self.release(v)
                flavor = self.assign(w)
                assert flavor is not None, "preemption made room that does not fit"
                self.admit(w, flavor, now)
                out.admitted.append(w)
                out.preempted += found
            elif q.strategy == "StrictFIFO":
                q.inadmissible.append(w)  # it blocks: nothing behind it is popped
                q.inadmissible += [e[2] for e in q.active]
                q.active.clear()
            else:
                q.inadmissible.append(w)
        return out
