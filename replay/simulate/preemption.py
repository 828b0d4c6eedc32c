"""Which admitted workloads the Kueue model preempts to admit one more: Kueue v0.19's classic
preemption, its fair-sharing preemption when the Configuration enables fair sharing, and the
issue's reclaim policy as two options of either. Both Kueue rules are unchanged from v0.17 to
v0.19 (`classicalPreemptions`, `fairPreemptions`, the strategies and `CandidatesOrdering` are
the same; v0.19 only skips the per-candidate loop when the preemptor's share is +Inf, a zero
weight, which no candidate could pass anyway).

Classic (`pkg/scheduler/preemption/preemption.go`, `classicalPreemptions`): lower-priority work
of the same queue, and work of cohort peers that borrow when the preemptor then fits within its
nominal quota; candidates in `CandidatesOrdering` (other queues first, lower priority, the most
recently admitted); the fewest that make room, the unneeded ones put back.

Fair sharing (`fairPreemptions`, strategies `[LessThanOrEqualToFinalShare,
LessThanInitialShare]`, Kueue's default and the product's): the incoming workload's usage is
counted first; the target queue is the one with the highest dominant resource share among the
preemptor's own queue and the peers that borrow (ties: the queue whose first candidate orders
first); a peer's workload is taken while the preemptor's share ≤ the peer's share after it is
gone (rule S2-a), else set aside; with the preemptor within its nominal quota every peer
candidate may be taken (`FairSharingPreemptWithinNominal`, on by default since v0.17); if that
does not make room, the set-aside ones are taken one per queue while the preemptor's share <
that queue's share before (S2-b).

The reclaim policy (the product's, not Kueue's; `Kueue(grace_s=…, victims_by_work_lost=…)`):
- grace: a peer's workload admitted less than `grace_s` ago is no candidate (counted from
  admission, the Workload's quota reservation, which Kueue and the portal both see); when
  that alone leaves a preemptor waiting, `Blocked.retry_at` says when the first such workload
  leaves its grace, so the preemptor is tried again then;
- victims by work lost: a peer's candidates ordered by the work an eviction throws away, time
  running × units (GPUs or slices, one resource: the same order), least first, instead of
  lowest priority first; candidates of the preemptor's own queue keep Kueue's order.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Protocol

from replay.simulate.queues import ClusterQueue, Key, Workload


class Kueue(Protocol):
    """What the rules read of the Kueue model (`kueue.Kueue`)."""

    queues: dict[str, ClusterQueue]
    members: dict[str | None, list[ClusterQueue]]
    grace_s: float
    victims_by_work_lost: bool

    def borrowing(self, q: ClusterQueue, key: Key, extra: float = 0) -> bool: ...

    def available(self, q: ClusterQueue, key: Key) -> float: ...

    def share(self, q: ClusterQueue, extra: Key | None = None, units: float = 0) -> float: ...

    def held_back(self, v: Workload, now: float) -> bool: ...


@dataclass
class Blocked:
    """No room: `retry_at` is when a candidate leaves its grace (None: nothing to wait for)."""

    retry_at: float | None = None


def work_lost(v: Workload, now: float) -> float:
    """What evicting `v` now throws away: its run so far × its units (0 if not running)."""
    if v.running_since is None:
        return 0.0
    return max(0.0, now - v.running_since) * v.units


def candidates(k: Kueue, w: Workload, q: ClusterQueue, key: Key, now: float, reclaim: bool):
    """Kueue's `findCandidates` for `w` on `key`: lower-priority work of `q`, and (with
    `reclaim`) all work of cohort peers that borrow `key`, less those in their grace. Returns
    them in preemption order and the earliest end of a grace that kept one out."""
    found: list[Workload] = []
    policy = q.within_cluster_queue
    if policy in ("LowerPriority", "LowerOrNewerEqualPriority"):
        found += [
            v for v in q.admitted if (v.flavor, v.resource) == key
            and (v.priority < w.priority or (
                policy == "LowerOrNewerEqualPriority"
                and v.priority == w.priority and v.timestamp > w.timestamp))
            and not k.held_back(v, now)
        ]  # fmt: skip
    retry_at = math.inf
    if reclaim and q.cohort and q.reclaim_within_cohort != "Never":
        for m in k.members[q.cohort]:
            if m is q or not k.borrowing(m, key):
                continue
            for v in m.admitted:
                if (v.flavor, v.resource) != key:
                    continue
                if q.reclaim_within_cohort == "LowerPriority" and v.priority >= w.priority:
                    continue
                if k.held_back(v, now):
                    continue
                admitted = v.admitted_at if v.admitted_at is not None else now
                if k.grace_s and now - admitted < k.grace_s:
                    retry_at = min(retry_at, admitted + k.grace_s)
                    continue
                found.append(v)
    found.sort(key=lambda v: order(k, v, q, now))
    return found, (retry_at if math.isfinite(retry_at) else None)


def order(k: Kueue, v: Workload, q: ClusterQueue, now: float) -> tuple:
    """`CandidatesOrdering`: other queues first, then lower priority, then the most recently
    admitted; a peer's by least work lost first when the model says so."""
    same = v.queue == q.name
    if k.victims_by_work_lost and not same:
        return (same, work_lost(v, now), 0.0, v.seq)
    return (same, v.priority, -(v.admitted_at or 0.0), v.seq)


def _take(k: Kueue, v: Workload, key: Key, sign: int) -> None:
    k.queues[v.queue].usage[key] += sign * v.units


def _fits(k: Kueue, q: ClusterQueue, key: Key, units: float) -> bool:
    return k.available(q, key) >= units


def _fill_back(k: Kueue, q: ClusterQueue, key: Key, units: float, removed: list) -> list:
    """Kueue's `fillBackWorkloads`: put back what is not needed, the last taken kept; then the
    usage restored (the engine evicts the victims for real)."""
    for v in reversed(removed[:-1]):
        _take(k, v, key, +1)
        if not _fits(k, q, key, units):
            _take(k, v, key, -1)
        else:
            removed.remove(v)
    for v in removed:
        _take(k, v, key, +1)
    return removed


def classic(k: Kueue, w: Workload, q: ClusterQueue, key: Key, now: float):
    quota = q.quotas[key]
    within_nominal = q.usage[key] + w.units <= quota.nominal
    found, retry_at = candidates(k, w, q, key, now, reclaim=within_nominal)
    removed: list[Workload] = []
    for v in found:
        vq = k.queues[v.queue]
        if vq is not q and not k.borrowing(vq, key):
            continue  # that queue is back within its nominal: no longer reclaimable
        _take(k, v, key, -1)
        removed.append(v)
        if _fits(k, q, key, w.units):
            return _fill_back(k, q, key, w.units, removed)
    for v in removed:
        _take(k, v, key, +1)
    return Blocked(retry_at)


def _next_target(k: Kueue, q: ClusterQueue, left: dict, pruned: set, now: float):
    """The queue to preempt from next (`TargetClusterQueueOrdering.nextTarget`, flat cohort):
    the highest share among `q` and the borrowing peers that have candidates left."""
    best, best_key = None, None
    for name, vs in left.items():
        m = k.queues[name]
        if name in pruned:
            continue
        if not vs or (m is not q and not any(k.borrowing(m, kk) for kk in m.quotas)):
            pruned.add(name)
            continue
        rank = (-k.share(m), order(k, vs[0], q, now))
        if best_key is None or rank < best_key:
            best, best_key = m, rank
    return best


def fair(k: Kueue, w: Workload, q: ClusterQueue, key: Key, now: float):
    found, retry_at = candidates(k, w, q, key, now, reclaim=True)
    if not found:
        return Blocked(retry_at)
    left: dict[str, list[Workload]] = defaultdict(list)
    for v in found:
        left[v.queue].append(v)
    removed: list[Workload] = []

    def take(v: Workload) -> bool:
        """Take `v`; does `w` fit now (its own usage, counted for the shares, set aside)?"""
        _take(k, v, key, -1)
        removed.append(v)
        q.usage[key] -= w.units
        ok = _fits(k, q, key, w.units)
        q.usage[key] += w.units
        return ok

    q.usage[key] += w.units  # shares include the incoming workload
    within_nominal = q.usage[key] <= q.quotas[key].nominal
    fits, retry, pruned = False, [], set[str]()
    while not fits and (target := _next_target(k, q, left, pruned, now)) is not None:
        vs = left[target.name]
        if target is q or within_nominal:
            fits = take(vs.pop(0))
            continue
        mine = k.share(q)
        while vs:
            v = vs.pop(0)
            _take(k, v, key, -1)
            after = k.share(target)
            _take(k, v, key, +1)
            if mine <= after:  # S2-a: LessThanOrEqualToFinalShare
                fits = take(v)
                break
            retry.append(v)
    if not fits:
        again: dict[str, list[Workload]] = defaultdict(list)
        for v in retry:
            again[v.queue].append(v)
        pruned = set()
        while not fits and (target := _next_target(k, q, again, pruned, now)) is not None:
            if k.share(q) < k.share(target):  # S2-b: LessThanInitialShare
                fits = take(again[target.name].pop(0))
            pruned.add(target.name)
    q.usage[key] -= w.units
    if not fits:
        for v in removed:
            _take(k, v, key, +1)
        return Blocked(retry_at)
    return _fill_back(k, q, key, w.units, removed)
