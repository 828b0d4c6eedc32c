"""Which borrowers give their units back to a lender, and why: the decision alone (pure)."""

from datetime import UTC, datetime, timedelta

import pytest

from catalog.models import Pool
from catalog.slices import SLICE_RESOURCE
from scheduler.cluster.reconcile.specs import build_specs
from scheduler.cluster.render.kueue import render_cluster_queue
from scheduler.cluster.render.specs import TenantSpec
from scheduler.workloads.queue.grace import (
    Admitted,
    Line,
    Queue,
    Waiting,
    choose_victims,
    heads,
)
from scheduler.workloads.queue.reclaim import (
    RECLAIMED_AT,
    RECLAIMED_FOR,
    RECLAIMED_FOR_WORKLOAD,
    describe,
    grace_by_line,
    read_queue,
    read_workloads,
    to_reactivate,
)
from tenants.services.grants import grant_quota
from tests.tenants.factories import PoolFactory, ResourceClassFactory

MIG = "nvidia.com/mig-3g.40gb"

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
A100 = ("a100-80gb", "gpu-portal.io/gpu-slices")
H100 = ("h100-80gb", "gpu-portal.io/gpu-slices")
GRACE = {A100: 600, H100: 600}


def queue(name, nominal, key=A100, **kw):
    return Queue(name, "c", {key: Line(nominal)}, **kw)


def running(queue, name, units, minutes, key=A100, **kw):
    return Admitted(queue, queue, name, {key: units}, NOW - timedelta(minutes=minutes), **kw)


def waiting(queue, name, units, key=A100, priority=0, created="2026-12-02T11:59:00Z"):
    return Waiting(queue, queue, name, {key: units}, priority, created)


def names(victims):
    return [v.workload.name for v in victims]


def test_the_lender_takes_back_from_the_borrower_once_the_grace_is_over():
    queues = [queue("lend", 14), queue("borrow", 0)]
    borrowed = running("borrow", "long", 14, minutes=30)
    victims = choose_victims(queues, [borrowed], [waiting("lend", "own", 14)], GRACE, NOW)
    assert names(victims) == ["long"]
    (v,) = victims
    assert (v.lender, v.for_workload, v.line, v.held, v.grace_s) == ("lend", "own", A100, 14, 600)
    assert v.ran_s == 1800 and v.work_lost == 14 * 1800


def test_a_borrower_within_its_grace_is_spared_and_nothing_is_evicted_for_nothing():
    queues = [queue("lend", 14), queue("borrow", 0)]
    young = running("borrow", "young", 7, minutes=5)
    old = running("borrow", "old", 7, minutes=60)
    # the lender needs 14: the old one alone is not enough, and the young one has its grace
    assert choose_victims(queues, [young, old], [waiting("lend", "own", 14)], GRACE, NOW) == []
    # a lender that needs 7 gets the old one's
    victims = choose_victims(queues, [young, old], [waiting("lend", "own", 7)], GRACE, NOW)
    assert names(victims) == ["old"]
    # and once the young one is past its grace too, both
    later = NOW + timedelta(minutes=6)
    head = [waiting("lend", "own", 14)]
    assert names(choose_victims(queues, [young, old], head, GRACE, later)) == ["young", "old"]
    # a grace of 0: at once
    assert names(choose_victims(queues, [young, old], head, {A100: 0}, NOW)) == ["young", "old"]


def test_least_work_lost_first_and_only_as_many_as_the_lender_needs():
    queues = [queue("lend", 14), queue("b", 0), queue("c", 0)]
    work = [
        running("b", "big-long", 7, minutes=600),  # 4200 unit·min
        running("c", "small-new", 2, minutes=20),  # 40
        running("b", "small-old", 2, minutes=300),  # 600
        running("c", "mid", 3, minutes=30),  # 90
    ]
    victims = choose_victims(queues, work, [waiting("lend", "own", 5)], GRACE, NOW)
    # 14 nominal, 14 borrowed: the lender needs 5, the cheapest losses until there are 5
    assert names(victims) == ["small-new", "mid"]
    victims = choose_victims(queues, work, [waiting("lend", "own", 6)], GRACE, NOW)
    assert names(victims) == ["small-new", "mid", "small-old"]


def test_never_a_workload_of_a_team_within_its_nominal():
    # b runs 10 on its own 10 and borrows 4 of the lender's: only the borrowed part is fair
    # game, so once one of b's is evicted, b is within its nominal and the rest are safe
    queues = [queue("lend", 4), queue("b", 10), queue("own-only", 6)]
    work = [
        running("b", "b1", 4, minutes=20),
        running("b", "b2", 4, minutes=30),
        running("b", "b3", 6, minutes=40),
        running("own-only", "o1", 1, minutes=15),  # the cheapest, but within its nominal
        running("own-only", "o2", 5, minutes=15),
    ]
    victims = choose_victims(queues, work, [waiting("lend", "own", 4)], GRACE, NOW)
    assert names(victims) == ["b1"]
    # asking for more than is borrowed is not met by evicting teams within their nominal
    assert choose_victims(queues, work, [waiting("lend", "own", 8)], GRACE, NOW) == []


def test_nothing_to_reclaim_when_the_head_fits_idle_units_or_exceeds_the_nominal():
    queues = [queue("lend", 14), queue("borrow", 0)]
    borrowed = running("borrow", "long", 7, minutes=30)
    # 7 of the lender's 14 are idle: Kueue admits a 7 on its own
    assert choose_victims(queues, [borrowed], [waiting("lend", "own", 7)], GRACE, NOW) == []
    # more than its own nominal: the lender borrows like anyone, it reclaims nothing
    assert choose_victims(queues, [borrowed], [waiting("lend", "own", 21)], GRACE, NOW) == []
    # a queue that Kueue reclaims for (reclaimWithinCohort Any) is not the portal's to serve
    kueue_reclaims = [queue("lend", 14, by_portal=False), queue("borrow", 0)]
    full = running("borrow", "full", 14, minutes=30)
    assert choose_victims(kueue_reclaims, [full], [waiting("lend", "own", 7)], GRACE, NOW) == []


def test_another_model_is_neither_needed_nor_taken():
    queues = [
        Queue("lend", "c", {A100: Line(14), H100: Line(14)}),
        Queue("borrow", "c", {A100: Line(0), H100: Line(0)}),
    ]
    work = [running("borrow", "on-h100", 14, minutes=90, key=H100)]
    assert choose_victims(queues, work, [waiting("lend", "own", 7)], GRACE, NOW) == []
    work.append(running("borrow", "on-a100", 14, minutes=200))
    assert names(choose_victims(queues, work, [waiting("lend", "own", 7)], GRACE, NOW)) == [
        "on-a100"
    ]


def test_idempotent_a_victim_on_its_way_out_is_not_chosen_again_nor_another_one():
    queues = [queue("lend", 14), queue("borrow", 0)]
    work = [running("borrow", "a", 7, minutes=30), running("borrow", "b", 7, minutes=40)]
    head = [waiting("lend", "own", 7)]
    first = choose_victims(queues, work, head, GRACE, NOW)
    assert names(first) == ["a"]
    assert names(choose_victims(queues, work, head, GRACE, NOW)) == ["a"]  # same inputs
    # the next pass sees "a" deactivated, its quota not yet released: nobody else goes
    leaving = [running("borrow", "a", 7, minutes=30, leaving=True), work[1]]
    assert choose_victims(queues, leaving, head, GRACE, NOW) == []


def test_two_lenders_do_not_take_the_same_victim_and_each_head_in_kueue_order():
    queues = [queue("l1", 7), queue("l2", 7), queue("borrow", 0)]
    work = [running("borrow", "x", 7, minutes=30), running("borrow", "y", 7, minutes=60)]
    pending = [
        waiting("l2", "l2-own", 7, created="2026-12-02T11:00:00Z"),
        waiting("l1", "l1-own", 7, priority=100, created="2026-12-02T11:30:00Z"),
        waiting("l1", "l1-later", 7, priority=100, created="2026-12-02T11:40:00Z"),
    ]
    assert [h.name for h in heads(pending)] == ["l1-own", "l2-own"]
    victims = choose_victims(queues, work, pending, GRACE, NOW)
    assert [(v.workload.name, v.lender) for v in victims] == [("x", "l1"), ("y", "l2")]


def test_a_lender_that_lends_nothing_has_no_one_to_take_back_from():
    queues = [
        Queue("lend", "c", {A100: Line(7, lend=False)}),
        Queue("other", "c", {A100: Line(7)}),
        queue("borrow", 0),
    ]
    # the borrower borrows the other queue's 7; the lender's own 7 are idle: it fits now
    work = [running("borrow", "x", 7, minutes=30)]
    assert choose_victims(queues, work, [waiting("lend", "own", 7)], GRACE, NOW) == []


def test_what_the_evicted_workloads_page_says():
    queues = [queue("tenant-ml", 1), queue("tenant-cv", 0)]
    work = [running("tenant-cv", "job-train", 1, minutes=14)]  # one slice: 1/7 GPU
    (v,) = choose_victims(queues, work, [waiting("tenant-ml", "own", 1)], GRACE, NOW)
    assert describe(v, "ml") == (
        "Given back to team ml after the 10 min grace: it ran 14 min on borrowed A100-80GB "
        "slices; chosen as the least work lost (2 GPU·min)"
    )


# --- what the controller reads from Kueue's objects, and what it renders ---------------------


def kueue_workload(name, ns, *, reserved=None, active=None, annotations=None, requests=None):
    """A Kueue Workload as the API server returns it: admitted with `reserved` units (at 11:00)
    or waiting for `requests` (after Kueue's transformations), on a pod set asking for H100s."""
    kw = {
        "metadata": {
            "name": name,
            "namespace": ns,
            "creationTimestamp": "2026-12-02T10:00:00Z",
            "annotations": annotations or {},
        },
        "spec": {
            "priority": 10,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"nodeSelector": {GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3"}}},
                }
            ],
        },
        "status": {"conditions": []},
    }
    if active is not None:
        kw["spec"]["active"] = active
    if reserved is not None:
        kw["status"]["conditions"] = [
            {"type": t, "status": "True", "lastTransitionTime": "2026-12-02T11:00:00Z"}
            for t in ("QuotaReserved", "Admitted")
        ]
        kw["status"]["admission"] = {
            "clusterQueue": ns,
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"cpu": "gpu-portal-default", H100[1]: H100[0]},
                    "resourceUsage": {"cpu": "500m", H100[1]: str(reserved)},
                    "count": 1,
                }
            ],
        }
    if requests is not None:
        kw["status"]["resourceRequests"] = [
            {"name": "main", "resources": {"cpu": "1", H100[1]: str(requests)}}
        ]
    return kw


GPU_PRODUCT = "nvidia.com/gpu.product"


def cluster_queue(name, nominal, reclaim="Never", lend=True):
    resource = {"name": H100[1], "nominalQuota": str(nominal)}
    if not lend:
        resource["lendingLimit"] = "0"
    return {
        "metadata": {"name": name},
        "spec": {
            "cohortName": "c",
            "preemption": {"reclaimWithinCohort": reclaim, "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "d", "resources": [{"name": "cpu", "nominalQuota": "64"}]}
                    ],
                },
                {
                    "coveredResources": [H100[1]],
                    "flavors": [{"name": H100[0], "resources": [resource]}],
                },
            ],
        },
    }


def test_queues_and_workloads_are_read_as_the_decision_wants_them():
    lender = read_queue(cluster_queue("tenant-a", 14))
    assert lender == Queue("tenant-a", "c", {H100: Line(14)}, by_portal=True)
    assert not read_queue(cluster_queue("tenant-b", 0, reclaim="Any", lend=False)).by_portal
    assert read_queue(cluster_queue("tenant-b", 0, lend=False)).lines[H100] == Line(0, lend=False)
    queues = {"tenant-a": lender}
    flavors = {"NVIDIA-H100-80GB-HBM3": H100[0]}
    admitted, waiting = read_workloads(
        [
            kueue_workload("job-borrowed", "tenant-b", reserved=9),
            kueue_workload("job-leaving", "tenant-b", reserved=3, active=False),
            kueue_workload("job-own", "tenant-a", requests=14),
            kueue_workload("job-parked", "tenant-a", requests=7, active=False),
        ],
        queues,
        flavors,
    )
    assert [(a.name, a.queue, a.usage, a.leaving) for a in admitted] == [
        ("job-borrowed", "tenant-b", {H100: 9}, False),
        ("job-leaving", "tenant-b", {H100: 3}, True),
    ]
    assert admitted[0].since == datetime(2026, 12, 2, 11, 0, tzinfo=UTC)
    assert [(w.name, w.queue, w.requests, w.priority) for w in waiting] == [
        ("job-own", "tenant-a", {H100: 14}, 10)
    ]
    # a pod set that names no product: the one flavor its queue lists for the resource
    (w,) = read_workloads([kueue_workload("x", "tenant-a", requests=7)], queues, {})[1]
    assert w.requests == {H100: 7}


def test_requeued_once_kueue_released_it_and_the_lenders_workload_holds_the_room():
    def parked(name, head, at="2026-12-02T11:55:00+00:00", **kw):
        notes = {RECLAIMED_FOR: "team-a", RECLAIMED_FOR_WORKLOAD: head, RECLAIMED_AT: at}
        return kueue_workload(name, "b", active=False, annotations=notes, **kw)

    def ids(kws, now=NOW):
        return [w["metadata"]["name"] for w in to_reactivate(kws, now)]

    admitted_head = kueue_workload("own", "a", reserved=14)
    waiting_head = kueue_workload("own", "a", requests=14)
    released = parked("released", "a/own")
    evicting = parked("evicting", "a/own", reserved=7)  # Kueue has not released it yet
    by_hand = kueue_workload("by-hand", "b", active=False)  # someone else's deactivation
    assert ids([admitted_head, released, evicting, by_hand]) == ["released"]
    # the lender's workload not admitted yet: requeued now, Kueue might give the room back
    assert ids([waiting_head, released]) == []
    assert ids([released]) == ["released"]  # the lender's workload is gone
    # still waiting 10 min on: for something else; the victim goes back to its queue anyway
    assert ids([waiting_head, released], NOW + timedelta(minutes=6)) == ["released"]


def test_a_queue_whose_pools_give_a_grace_leaves_reclaiming_to_the_portal():
    base = dict(slug="t", name="T", active=True, gpu_quota={}, gpu_resource_names=())
    kueue_reclaims = render_cluster_queue(TenantSpec(**base), "tenant-t")["spec"]["preemption"]
    portal_reclaims = render_cluster_queue(TenantSpec(**base, reclaim_by_portal=True), "tenant-t")
    assert kueue_reclaims["reclaimWithinCohort"] == "Any"
    assert portal_reclaims["spec"]["preemption"] == {
        "reclaimWithinCohort": "Never",
        "withinClusterQueue": "LowerPriority",
        "borrowWithinCohort": {"policy": "Never"},
    }


@pytest.mark.django_db
def test_a_team_lending_on_a_line_with_a_grace_leaves_reclaiming_to_the_portal(world):
    # world's pool: a100 3g, the product's default grace (600 s); a limit of 2 to borrow
    Pool.objects.update(borrowing_limit=2)
    h100 = ResourceClassFactory(
        slug="h100-80gb-mig-3g.40gb", gpu_model="H100-80GB", resource_name=MIG
    )
    PoolFactory(resource_class=h100, borrowing_limit=2, reclaim_grace_s=60)
    whole = ResourceClassFactory(
        slug="h100-80gb", gpu_model="H100-80GB", kind="whole", resource_name="nvidia.com/gpu"
    )
    PoolFactory(resource_class=whole, borrowing_limit=2, reclaim_grace_s=3600)
    assert grace_by_line() == {
        ("a100-80gb", MIG): 600,
        ("a100-80gb", SLICE_RESOURCE): 600,
        ("h100-80gb", MIG): 60,
        ("h100-80gb", "nvidia.com/gpu"): 3600,
        ("h100-80gb", SLICE_RESOURCE): 3600,  # one line for the model: its largest grace
    }
    grant_quota(actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=2)
    specs = build_specs([world.tenant, world.other_tenant])
    assert specs[world.tenant.pk].reclaim_by_portal  # it lends its a100 slices, with a grace
    assert not specs[world.other_tenant.pk].reclaim_by_portal  # it lends nothing
    Pool.objects.filter(resource_class=world.rc).update(reclaim_grace_s=0)
    # graces on lines it only borrows on are the lenders' business: Kueue reclaims its a100s
    assert not build_specs([world.tenant])[world.tenant.pk].reclaim_by_portal
