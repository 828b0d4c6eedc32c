"""The Kueue model's preemption on hand-worked cases: fair sharing's admission order and its
strategies, and the issue's reclaim policy (a grace before reclaim, victims by work lost)."""

from __future__ import annotations

from replay.simulate import kueue as kq
from replay.simulate import preemption
from scheduler.cluster.render.kueue import render_cluster_queue
from scheduler.cluster.render.specs import QueueLine, TenantSpec

GPU = "nvidia.com/gpu"
FLAVOR = "b200-180gb"
KEY = (FLAVOR, GPU)
LOW, HIGH = 100_000, 900_000


def queue(name: str, nominal: int, borrowing: int | None = 8) -> dict:
    """A rendered ClusterQueue; `borrowing` None drops the limit, as slice_quota does."""
    spec = TenantSpec(
        slug=name, name=name, active=True, gpu_quota={}, gpu_resource_names=(GPU,),
        queue_lines=(QueueLine(FLAVOR, GPU, nominal, borrowing or 0, True),), cohort="c",
    )  # fmt: skip
    manifest = render_cluster_queue(spec, name)
    if borrowing is None:
        for r in manifest["spec"]["resourceGroups"][1]["flavors"][0]["resources"]:
            r.pop("borrowingLimit")
    return manifest


def model(*manifests: dict, **kw) -> kq.Kueue:
    return kq.Kueue([kq.cluster_queue(m) for m in manifests], **kw)


_seq = iter(range(10**6))


def wl(q: str, units: int = 1, priority: int = LOW, t: float = 0.0) -> kq.Workload:
    n = next(_seq)
    return kq.Workload(f"w{n}", q, GPU, units, priority, t, n)


def running(k: kq.Kueue, w: kq.Workload, since: float) -> kq.Workload:
    """Admit `w` as if at `since`, its pod running from then."""
    k.admit(w, FLAVOR, since)
    w.running_since = since
    return w


def test_an_omitted_borrowing_limit_reads_as_unlimited():
    q = kq.cluster_queue(queue("a", 2, borrowing=None))
    assert q.quotas[KEY].borrowing_limit is None
    k = model(queue("a", 2, borrowing=None), queue("b", 6))
    assert k.can_ever_fit(k.queues["a"], GPU, 100)  # the portal refuses nothing by size
    assert k.available(k.queues["a"], KEY) == 8  # all that the cohort lends


def test_a_borrowed_workload_inside_its_grace_is_not_reclaimed_until_it_ends():
    # a borrows b's unit; both of a's workloads are reclaim candidates once out of their grace
    k = model(queue("a", 1), queue("b", 1), grace_s=600)
    young = running(k, wl("a"), since=100)
    older = running(k, wl("a"), since=0)
    claim = wl("b", t=200)
    k.submit(claim)
    d = k.cycle(200.0)
    assert d.admitted == [] and d.preempted == []
    assert d.retry_at == 600  # the first to leave its grace: admitted at 0, a grace of 600
    assert k.queues["b"].inadmissible == [claim]
    k.requeue_inadmissible()  # the engine does this at retry_at
    d = k.cycle(600.0)
    assert d.admitted == [claim] and d.preempted == [older]
    assert young in k.queues["a"].admitted


def test_without_a_grace_the_same_claim_reclaims_at_once():
    k = model(queue("a", 1), queue("b", 1))
    young = running(k, wl("a"), since=100)
    running(k, wl("a"), since=0)
    k.submit(claim := wl("b", t=200))
    d = k.cycle(200.0)
    assert d.admitted == [claim] and d.preempted == [young] and d.retry_at is None


def test_victims_by_work_lost_take_the_least_run_times_units():
    # a borrows all 4 of b's units: a 3-GPU workload admitted at 200 (300 GPU-s lost at 300)
    # and a 1-GPU one admitted at 150 (150 GPU-s); b reclaims one unit
    def setup(**kw):
        k = model(queue("a", 0), queue("b", 4), **kw)
        wide = running(k, wl("a", units=3), since=200)
        narrow = running(k, wl("a", units=1), since=150)
        return k, wide, narrow

    k, wide, narrow = setup()
    k.submit(wl("b", t=300))
    assert k.cycle(300.0).preempted == [wide]  # Kueue's order: the most recently admitted
    k, wide, narrow = setup(victims_by_work_lost=True)
    assert preemption.work_lost(wide, 300) == 300 and preemption.work_lost(narrow, 300) == 150
    k.submit(wl("b", t=300))
    assert k.cycle(300.0).preempted == [narrow]


def test_a_workload_not_yet_running_loses_nothing_and_goes_first():
    k = model(queue("a", 0), queue("b", 2), victims_by_work_lost=True)
    ran = running(k, wl("a"), since=0)
    waiting = wl("a")
    k.admit(waiting, FLAVOR, 50.0)  # admitted, its pod not placed yet
    assert preemption.work_lost(waiting, 100) == 0
    k.submit(wl("b", t=100))
    assert k.cycle(100.0).preempted == [waiting]
    assert ran in k.queues["a"].admitted


def test_fair_sharing_admits_work_within_nominal_before_a_lower_share_that_borrows():
    # FairSharingPrioritizeNonBorrowing (on since v0.17): b's head needs no borrowing and goes
    # first although its share after admission would not be the lowest
    k = model(queue("a", 1), queue("b", 2), queue("c", 2), fair_sharing=True)
    for w in (wl("b"), wl("c"), wl("c")):
        k.submit(w)
    while any(q.active for q in k.queues.values()):
        k.cycle(0.0)
    borrower, owner = wl("a", t=0), wl("b", t=9)  # a has room for one of its own: none left
    running(k, wl("a"), since=0)
    k.submit(borrower)
    k.submit(owner)
    assert [w.queue for w in k.cycle(0.0).admitted] == ["b"]


def test_fair_sharing_preempts_only_a_queue_whose_share_stays_at_or_above_the_preemptors():
    # cohort of 6 lendable: a borrows 3 over its nominal 1, b borrows 1 over its nominal 1
    def setup():
        k = model(queue("a", 1), queue("b", 1), queue("c", 4), fair_sharing=True)
        a = [running(k, wl("a"), since=t) for t in (0, 1, 2, 3)]
        b = [running(k, wl("b"), since=t) for t in (0, 1)]
        return k, a, b

    k, a, _ = setup()
    # b asks one more (it would borrow 2): a's share after losing one (2 of 6) is still ≥
    # b's with it (2 of 6): S2-a takes from a, the most recently admitted
    k.submit(claim := wl("b", t=10))
    d = k.cycle(10.0)
    assert d.admitted == [claim] and d.preempted == [a[3]]
    # a asks one more: b's share after losing one (0) would be below a's (4 of 6), and below
    # before too (1 of 6 < 4 of 6): neither strategy lets a take from b
    k, _, b = setup()
    k.submit(wl("a", t=10))
    d = k.cycle(10.0)
    assert d.admitted == [] and d.preempted == []
    assert all(w in k.queues["b"].admitted for w in b)


def test_fair_sharing_reclaims_for_a_queue_within_its_nominal_whatever_the_shares():
    # FairSharingPreemptWithinNominal (on since v0.17): c owns 4, lent 3 of them to a
    k = model(queue("a", 1), queue("c", 4), fair_sharing=True)
    a = [running(k, wl("a"), since=t) for t in range(4)]
    running(k, wl("c"), since=0)
    k.submit(claim := wl("c", units=2, t=10))
    d = k.cycle(10.0)
    assert d.admitted == [claim] and sorted(d.preempted, key=lambda w: w.seq) == a[2:]


def test_fair_sharing_keeps_priority_preemption_inside_the_queue():
    k = model(queue("a", 1, borrowing=0), fair_sharing=True)
    low = running(k, wl("a"), since=0)
    k.submit(high := wl("a", priority=HIGH, t=5))
    d = k.cycle(5.0)
    assert d.admitted == [high] and d.preempted == [low] and d.in_queue == 1


def test_a_workload_preempted_twice_in_one_instant_is_held_back_there_only():
    k = model(queue("a", 1), queue("b", 1))
    v = running(k, wl("a"), since=0)
    k._preempted_now.update([id(v)] * kq.PING_PONG_LIMIT)
    k._instant = 5.0
    assert k.held_back(v, 5.0) and k.ping_pong == 1
    assert not k.held_back(v, 6.0)  # a new instant: offered again
