"""The Kueue model on hand-worked cases, its queues rendered by the portal's own render."""

from __future__ import annotations

import pytest

from replay.simulate import kueue as kq
from scheduler.cluster.render.kueue import render_cluster_queue
from scheduler.cluster.render.specs import QueueLine, TenantSpec

GPU = "nvidia.com/gpu"
FLAVOR = "b200-180gb"
LOW, HIGH = 100_000, 900_000


def queue(name: str, nominal: int, borrowing: int = 0, lend: bool = True) -> dict:
    spec = TenantSpec(
        slug=name,
        name=name,
        active=True,
        gpu_quota={},
        gpu_resource_names=(GPU,),
        queue_lines=(QueueLine(FLAVOR, GPU, nominal, borrowing, lend),),
        cohort="c",
    )
    return render_cluster_queue(spec, name)


def model(*manifests: dict, fair: bool = False) -> kq.Kueue:
    return kq.Kueue([kq.cluster_queue(m) for m in manifests], fair_sharing=fair)


_seq = iter(range(10**6))


def wl(q: str, units: int = 1, priority: int = LOW, t: float = 0.0) -> kq.Workload:
    n = next(_seq)
    return kq.Workload(f"w{n}", q, GPU, units, priority, t, n)


def admit_all(k: kq.Kueue, *ws: kq.Workload) -> kq.Decision:
    for w in ws:
        k.submit(w)
    out = kq.Decision()
    while any(q.active for q in k.queues.values()):
        d = k.cycle(0.0)
        out.admitted += d.admitted
        out.preempted += d.preempted
    return out


def test_the_quota_is_read_from_the_rendered_queue():
    q = kq.cluster_queue(queue("a", 3, 2, lend=False))
    assert q.quotas[(FLAVOR, GPU)] == kq.Quota(3, 2, 0)
    assert q.cohort == "c" and q.strategy == "BestEffortFIFO"
    assert (q.within_cluster_queue, q.reclaim_within_cohort) == ("LowerPriority", "Any")


def test_borrowing_stops_at_the_borrowing_limit_and_at_what_others_lend():
    k = model(queue("a", 2, borrowing=1), queue("b", 2), queue("c", 2, lend=False))
    d = admit_all(k, *[wl("a") for _ in range(5)])
    # a: its own 2 plus 1 of b's idle 2; c lends nothing; the limit says 1 more at most
    assert len(d.admitted) == 3
    assert k.queues["a"].usage[(FLAVOR, GPU)] == 3
    assert len(k.queues["a"].inadmissible) == 2
    # b's nominal is all lent: one unit is left in the pool, the other it reclaims from a
    d = admit_all(k, wl("b"), wl("b"))
    assert len(d.admitted) == 2
    assert [w.queue for w in d.preempted] == ["a"]
    assert admit_all(k, wl("b")).admitted == []  # b may not borrow (limit 0)


def test_a_lender_reclaims_by_preempting_the_newest_borrowed_work():
    k = model(queue("a", 2, borrowing=2), queue("b", 2))
    first = [wl("a", t=1), wl("a", t=2), wl("a", t=3)]
    admit_all(k, *first)
    k.cycle(0.0)
    newest = wl("a", t=4)
    admit_all(k, newest)
    for n, w in enumerate([*first, newest]):
        w.admitted_at = float(n)
    assert k.queues["a"].usage[(FLAVOR, GPU)] == 4
    claim = wl("b", t=5)
    d = admit_all(k, claim)
    assert d.admitted == [claim]
    assert d.preempted == [newest]  # the most recently admitted of the borrower's
    assert k.queues["a"].usage[(FLAVOR, GPU)] == 3


def test_no_reclaim_when_the_claimant_would_borrow_itself():
    k = model(queue("a", 2, borrowing=2), queue("b", 2, borrowing=2))
    admit_all(k, *[wl("a") for _ in range(4)])
    d = admit_all(k, wl("b", units=3))  # beyond b's nominal: reclaim does not apply
    assert d.admitted == [] and d.preempted == []


def test_within_the_queue_higher_priority_preempts_lower_only():
    k = model(queue("a", 2))
    lows = [wl("a", t=1), wl("a", t=2)]
    admit_all(k, *lows)
    lows[0].admitted_at, lows[1].admitted_at = 1.0, 2.0
    assert admit_all(k, wl("a", t=3)).preempted == []  # same priority: it waits
    high = wl("a", priority=HIGH, t=4)
    d = admit_all(k, high)
    assert d.admitted == [high] and d.preempted == [lows[1]]


def test_a_cycle_admits_work_within_nominal_before_work_that_borrows():
    k = model(queue("a", 1, borrowing=2), queue("b", 2))
    admit_all(k, wl("a"), wl("b"))  # one unit left in the cohort: b's
    borrower, owner = wl("a", t=0), wl("b", t=9)  # the borrower is older
    k.submit(borrower)
    k.submit(owner)
    d = k.cycle(0.0)
    assert d.admitted == [owner]


def test_fair_sharing_admits_the_queue_with_the_lower_share_first():
    manifests = (queue("a", 1, borrowing=4), queue("b", 1, borrowing=4), queue("c", 4))
    for fair, winner in ((False, "a"), (True, "b")):
        k = model(*manifests, fair=fair)
        admit_all(k, wl("a"), wl("a"), wl("a"), wl("b"), wl("c"))  # a borrows 2, b none
        assert sum(q.usage[(FLAVOR, GPU)] for q in k.queues.values()) == 5
        # one unit left; both heads would borrow it; a's is older
        k.submit(wl("a", t=-1))
        k.submit(wl("b", t=5))
        d = k.cycle(0.0)
        assert [w.queue for w in d.admitted] == [winner]


def test_the_portals_refusal_reads_nominal_plus_borrowing_limit():
    k = model(queue("a", 2), queue("b", 2, borrowing=3))
    assert not k.can_ever_fit(k.queues["a"], GPU, 3)
    assert k.can_ever_fit(k.queues["b"], GPU, 5)
    assert not k.can_ever_fit(k.queues["b"], "nvidia.com/mig-1g.23gb", 1)


def test_strict_fifo_head_blocks_its_queue():
    m = queue("a", 2)
    m["spec"]["queueingStrategy"] = "StrictFIFO"
    k = model(m)
    admit_all(k, wl("a"))
    d = admit_all(k, wl("a", units=2, t=1), wl("a", t=2))
    assert d.admitted == []


@pytest.mark.parametrize(("text", "value"), [("4", 4), ("500m", 0.5), ("2Gi", 2**31)])
def test_quantities(text, value):
    assert kq.quantity(text) == value
