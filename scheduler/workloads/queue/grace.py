"""Reclaim with a grace: which borrowers give their units back to a lender, and why (pure).

Kueue has no minimum run time for borrowed units: with `reclaimWithinCohort: Any` a lender
preempts borrowers at once, lowest priority then newest first, so a long job on borrowed GPUs
can lose a day of work to a lender's five-minute job. When a pool has a `reclaim_grace_s`, the
rendered ClusterQueues say `Never` and the portal reclaims instead (`reclaim.py` reads the
cluster and acts); this module decides, from plain data:

- a lender is a queue whose pending head would fit within its own nominal quota but does not
  fit in what the cohort leaves idle (others borrow it);
- candidates are the admitted workloads of *other* queues on a (flavor, resource) line they
  borrow on (usage above nominal): never a workload of a queue within its nominal;
- a candidate that has run less than its line's grace is spared (and, while any is needed,
  nothing is evicted yet: evicting some work without making room would lose it for nothing);
- victims are chosen by least work lost (running time x units held, smallest first) until
  the head fits; a queue stops being a source once it is back within its nominal.

The same inputs give the same victims, and a victim already on its way out (deactivated) is
not counted as using anything: run twice, it chooses no one twice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime

Key = tuple[str, str]  # (flavor, resource)


@dataclass(frozen=True)
class Line:
    """One (flavor, resource) quota of a ClusterQueue."""

    nominal: int
    lend: bool = True  # lendingLimit 0: its idle units are not the cohort's


@dataclass(frozen=True)
class Queue:
    name: str  # the ClusterQueue (the team's namespace)
    cohort: str
    lines: dict[Key, Line]
    by_portal: bool = True  # reclaimWithinCohort Never: Kueue leaves reclaiming to the portal


@dataclass(frozen=True)
class Admitted:
    """A workload holding quota: `usage` per line, admitted (put on these units) at `since`."""

    queue: str
    namespace: str
    name: str
    usage: dict[Key, int]
    since: datetime
    leaving: bool = False  # deactivated, its quota about to be released


@dataclass(frozen=True)
class Waiting:
    """A workload waiting for quota: what it asks for per line."""

    queue: str
    namespace: str
    name: str
    requests: dict[Key, int]
    priority: int = 0
    created: str = ""  # sortable (RFC 3339)


@dataclass(frozen=True)
class Victim:
    workload: Admitted
    lender: str  # the queue it gives its units back to
    line: Key  # the borrowed line that made it a candidate
    ran_s: float
    held: int
    grace_s: int
    for_workload: str = ""  # the lender's waiting workload it makes room for

    @property
    def work_lost(self) -> float:
        """Unit-seconds of work the eviction loses (running time x units held)."""
        return self.ran_s * self.held


@dataclass
class _Usage:
    by_queue: dict[str, dict[Key, int]] = field(default_factory=lambda: defaultdict(dict))

    def of(self, queue: str, key: Key) -> int:
        return self.by_queue[queue].get(key, 0)

    def add(self, queue: str, usage: dict[Key, int], sign: int = 1) -> None:
        for key, n in usage.items():
            self.by_queue[queue][key] = self.of(queue, key) + sign * n


def idle_for(lender: Queue, key: Key, queues: list[Queue], usage: _Usage) -> int:
    """Units of `key` the lender could be given now: its own idle nominal plus what the other
    queues of its cohort lend (a borrower's usage beyond its nominal takes from that)."""
    idle = 0
    for q in queues:
        if q.cohort != lender.cohort or key not in q.lines:
            continue
        free = q.lines[key].nominal - usage.of(q.name, key)
        if q.name != lender.name and not q.lines[key].lend:
            free = min(0, free)  # lends nothing, but may borrow what others lend
        idle += free
    return idle


def heads(waiting: list[Waiting]) -> list[Waiting]:
    """The first waiting workload of each queue, in Kueue's order (priority, then age); the
    heads themselves in the same order."""
    first: dict[str, Waiting] = {}
    for w in sorted(waiting, key=lambda w: (-w.priority, w.created, w.name)):
        first.setdefault(w.queue, w)
    return list(first.values())


def choose_victims(
    queues: list[Queue],
    admitted: list[Admitted],
    waiting: list[Waiting],
    grace_s: dict[Key, int],
    now: datetime,
) -> list[Victim]:
    """Victims to evict so that lenders' heads fit, with what made each one a victim."""
    by_name = {q.name: q for q in queues}
    usage = _Usage()
    for a in admitted:
        if not a.leaving:
            usage.add(a.queue, a.usage)
    taken: set[tuple[str, str]] = set()
    victims: list[Victim] = []
    for head in heads(waiting):
        lender = by_name.get(head.queue)
        if lender is None or not lender.by_portal or not head.requests:
            continue
        if not _fits_nominal(lender, head, usage):
            continue  # beyond its own quota it borrows like anyone: nothing to reclaim
        need = {k: n - idle_for(lender, k, queues, usage) for k, n in head.requests.items()}
        need = {k: n for k, n in need.items() if n > 0}
        if need:
            chosen = _enough(lender, need, by_name, admitted, taken, usage, grace_s, now)
            if not chosen:
                continue  # not yet: what could make room is still within its grace
            for v in chosen:
                taken.add((v.workload.namespace, v.workload.name))
                usage.add(v.workload.queue, v.workload.usage, sign=-1)
                victims.append(replace(v, for_workload=head.name))
        # the head takes the room (made or already idle): the next lender counts without it
        usage.add(lender.name, head.requests)
    return victims


def _fits_nominal(lender: Queue, head: Waiting, usage: _Usage) -> bool:
    return all(
        key in lender.lines and usage.of(lender.name, key) + n <= lender.lines[key].nominal
        for key, n in head.requests.items()
    )


def _enough(
    lender: Queue,
    need: dict[Key, int],
    by_name: dict[str, Queue],
    admitted: list[Admitted],
    taken: set[tuple[str, str]],
    usage: _Usage,
    grace_s: dict[Key, int],
    now: datetime,
) -> list[Victim]:
    """Least work lost first until `need` is met; [] when what may be evicted now is not
    enough (the rest still in its grace, or nothing borrowed to take back)."""
    candidates = []
    for a in admitted:
        source = by_name.get(a.queue)
        if (
            a.leaving
            or (a.namespace, a.name) in taken
            or source is None
            or source.name == lender.name
            or source.cohort != lender.cohort
        ):
            continue
        lines = [k for k in need if a.usage.get(k, 0) > 0]
        if not lines:
            continue
        key = max(lines, key=lambda k: a.usage[k])
        ran = (now - a.since).total_seconds()
        grace = max(grace_s.get(k, 0) for k in lines)
        if ran < grace:
            continue
        candidates.append(Victim(a, lender.name, key, ran, a.usage[key], grace))
    candidates.sort(key=lambda v: (v.work_lost, v.ran_s, v.workload.name))
    left = dict(need)
    trial = _Usage()  # a copy of the usage, which the choice changes as it goes
    for q, used in usage.by_queue.items():
        trial.by_queue[q] = dict(used)
    chosen = []
    for v in candidates:
        if not left:
            break
        source = by_name[v.workload.queue]
        if not _borrows(source, v.workload.usage, left, trial):
            continue  # its queue is back within its nominal: never evict within a nominal
        chosen.append(v)
        trial.add(source.name, v.workload.usage, sign=-1)
        for k, n in v.workload.usage.items():
            if k in left:
                left[k] -= n
                if left[k] <= 0:
                    del left[k]
    return chosen if not left else []


def _borrows(queue: Queue, held: dict[Key, int], need: dict[Key, int], usage: _Usage) -> bool:
    """The queue uses more than its nominal on a line the lender still needs and `held` is on."""
    return any(
        usage.of(queue.name, k) > (queue.lines[k].nominal if k in queue.lines else 0)
        for k in need
        if held.get(k, 0) > 0
    )
