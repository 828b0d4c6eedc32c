"""A model of Kueue's admission (v0.19 semantics, flat cohort), built from the ClusterQueue and
WorkloadPriorityClass manifests the portal renders: nothing here restates a limit.

What it models is the same in v0.17 and v0.19 for the portal's configuration: no difference
between the two reaches the order of heads, quota or preemption as modelled here (docs/replay.md,
"Kueue v0.19").

What is modelled, and where Kueue documents it:
- quota per (flavor, resource): `nominalQuota`, `borrowingLimit` (absent: unlimited),
  `lendingLimit` (absent: all of the nominal is lent); a queue may use its guaranteed part
  (nominal − lending limit) plus what the cohort's lent pool has left, never more than
  nominal + borrowing limit (`concepts/cluster_queue.md`, "Borrowing/Lending limits");
- flavors tried in the order the queue lists them; the first that fits wins, and with the
  default `whenCanBorrow: MayStopSearch` (v1beta1's `Borrow`) one that fits by borrowing also
  wins;
- queues: `BestEffortFIFO` (a head that does not fit is set aside as inadmissible until quota
  is released in the cohort; the next one is tried) and `StrictFIFO` (the head blocks);
  order within a queue: higher priority first, then the older queue timestamp;
- one admission cycle takes one head per ClusterQueue and handles them in Kueue's entry
  order: those that need no borrowing first, then higher priority, then older;
- classic preemption: `withinClusterQueue: LowerPriority` (lower-priority work of the same
  queue), `reclaimWithinCohort: Any | LowerPriority` (work of queues that borrow, when the
  preemptor then fits within its own nominal quota); candidates in other queues first, lower
  priority first, the most recently admitted first; the fewest that make room; the preemptor
  takes its victims' quota at once (`concepts/preemption.md`; the rules in `preemption`);
- `resources.transformations` in the Kueue Configuration (strategy `Replace`): a request of an
  input resource counts as `multiplier` × its quantity of each output resource, and only the
  outputs are accounted against quota (`transform`, `transformations_of` reads the portal's
  `catalog.slices.kueue_transformations`);
- fair sharing, when the Kueue Configuration has a `fairSharing` block (the rows from g):
  heads that need no borrowing first, then by their queue's dominant resource share with the
  head admitted, lowest first; preemption by fair sharing's strategies (`preemption.fair`);
- the issue's reclaim policy (not Kueue's): a grace before a borrowed workload may be
  reclaimed, and victims by least work lost (`preemption`).

Not modelled: hierarchical cohorts and Cohort objects' own quota, admission checks,
`borrowWithinCohort` (the portal renders `Never`), partial admission, resources other than
those a workload asks for (the replay's pods ask GPUs only).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass, field

from replay.simulate import preemption
from replay.simulate.queues import ClusterQueue, Key, Quota, Workload, cluster_queue, quantity

# Preemptions of one workload within one instant after which the model stops offering it as a
# victim there: with several resources per queue, fair sharing can ping-pong (queue A borrows
# resource X, so its work on Y is a fair-sharing target; the queue it lost Y to reclaims it at
# once, being within nominal), which at zero latency never ends; on a cluster it would churn.
PING_PONG_LIMIT = 2

__all__ = [  # the model's data lives in `queues`; callers keep reading it from here
    "PING_PONG_LIMIT", "ClusterQueue", "Decision", "Key", "Kueue", "Quota", "Transformations",
    "Workload", "cluster_queue", "priorities", "quantity", "transform", "transformations_of",
]  # fmt: skip

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


def transformations_of(entries: list[dict]) -> Transformations:
    """The Configuration's `resources.transformations` list as `transform` reads it."""
    out: Transformations = {}
    for entry in entries:
        if entry.get("strategy", "Retain") != "Replace":
            raise ValueError(f"{entry['input']}: only the Replace strategy is modelled")
        out[entry["input"]] = {r: quantity(n) for r, n in entry["outputs"].items()}
    return out


def priorities(manifests: list[dict]) -> dict[str, int]:
    """WorkloadPriorityClass name -> value, from the rendered manifests."""
    return {m["metadata"]["name"]: int(m["value"]) for m in manifests}


@dataclass
class Decision:
    admitted: list[Workload] = field(default_factory=list)
    preempted: list[Workload] = field(default_factory=list)
    retry_at: float | None = None  # a preemptor waits for a grace to end: try it again then
    in_queue: int = 0  # of the preempted, those preempted by work of their own queue (priority)


class Kueue:
    """The ClusterQueues of one cohort (or several) and their workloads."""

    def __init__(
        self,
        queues: list[ClusterQueue],
        *,
        fair_sharing: bool = False,
        grace_s: float = 0.0,
        victims_by_work_lost: bool = False,
    ) -> None:
        self.queues = {q.name: q for q in queues}
        self.fair_sharing = fair_sharing
        self.grace_s = grace_s  # the reclaim policy's (`preemption`), not Kueue's
        self.victims_by_work_lost = victims_by_work_lost
        self.ping_pong = 0  # victims held back by PING_PONG_LIMIT (0: it never fired)
        self._instant: float | None = None
        self._preempted_now: Counter[int] = Counter()
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
        """The portal's admission rule (`admission.check_fits`), read off the
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

    # --- preemption (`preemption`) --------------------------------------------------------

    def held_back(self, v: Workload, now: float) -> bool:
        """`v` was preempted PING_PONG_LIMIT times at this instant: no victim again now."""
        if now != self._instant:
            self._instant = now
            self._preempted_now.clear()
        if self._preempted_now[id(v)] < PING_PONG_LIMIT:
            return False
        self.ping_pong += 1
        return True

    def victims(self, w: Workload, now: float = 0.0) -> list[Workload] | preemption.Blocked:
        """The admitted workloads to preempt for `w`, on the first of its flavors where that
        makes room (fair sharing's rules when configured, else classic), or why not."""
        q = self.queues[w.queue]
        rule = preemption.fair if self.fair_sharing else preemption.classic
        blocked = preemption.Blocked()
        for flavor in q.flavors.get(w.resource, []):
            found = rule(self, w, q, (flavor, w.resource), now)
            if isinstance(found, list):
                return found
            if found.retry_at is not None:
                ends = [t for t in (blocked.retry_at, found.retry_at) if t is not None]
                blocked = preemption.Blocked(min(ends))
        return blocked

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
            # the tournament (`fair_sharing_iterator.go`, `entryComparer.less`): no borrowing
            # first (FairSharingPrioritizeNonBorrowing, beta and on by default since v0.17,
            # still in v0.19), then the lower share with the workload admitted, then priority,
            # then age (v0.19's PrioritizePreemptorWorkloads, before these, is alpha and off)
            key = (flavor, w.resource) if flavor else None
            return (borrows, self.share(q, key, w.units), *w.order())
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
            found = self.victims(w, now)
            if isinstance(found, preemption.Blocked):
                if found.retry_at is not None:
                    ends = [t for t in (out.retry_at, found.retry_at) if t is not None]
                    out.retry_at = min(ends)
                found = []
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
                self._preempted_now.update(id(v) for v in found)
                out.in_queue += sum(v.queue == w.queue for v in found)
            elif q.strategy == "StrictFIFO":
                q.inadmissible.append(w)  # it blocks: nothing behind it is popped
                q.inadmissible += [e[2] for e in q.active]
                q.active.clear()
            else:
                q.inadmissible.append(w)
        return out
