"""Why a waiting workload waits (issue 29, item 6): the pure explanation, one reason at a time,
in slices and in class units (no database)."""

from dataclasses import replace

import pytest

from catalog import slices
from scheduler.workloads.queue.counting import Facts, Holder, Offer, PoolPolicy, Shape, TeamUse
from scheduler.workloads.queue.waiting import explain, is_waiting

SHAPES = {
    s.slug: s
    for s in (
        Shape("a100-80gb", "A100-80GB", "whole", "", 7, "A100-80GB whole GPU"),
        Shape("a100-80gb-mig-1g.10gb", "A100-80GB", "mig", "1g.10gb", 1, "A100-80GB MIG 1g.10gb"),
        Shape("a100-80gb-mig-3g.40gb", "A100-80GB", "mig", "3g.40gb", 3, "A100-80GB MIG 3g.40gb"),
        Shape("a100-80gb-mig-4g.40gb", "A100-80GB", "mig", "4g.40gb", 4, "A100-80GB MIG 4g.40gb"),
        Shape("h100-80gb", "H100-80GB", "whole", "", 7, "H100-80GB whole GPU"),
    )
}
PRIORITIES = {"gpu-critical": 1_000_000, "gpu-high": 900_000, "gpu-low": 100_000}
NO_BORROWING = {slug: PoolPolicy(0) for slug in SHAPES}
# The A100 team of the brief: 14 slices granted (2 whole GPUs), all held by its own work.
HOLDERS = (
    Holder("train-a", "gpu-low", {"a100-80gb-mig-3g.40gb": 1}),
    Holder("eval-b", "gpu-low", {"a100-80gb-mig-1g.10gb": 4}),
    Holder("prep", "gpu-low", {"a100-80gb": 1}),
)
FULL = Facts(
    state="queued",
    ask={"a100-80gb-mig-3g.40gb": 1},
    pods=1,
    priority="gpu-low",
    shapes=SHAPES,
    granted={"a100-80gb": 2},
    holders=HOLDERS,
    pools=NO_BORROWING,
    position=3,
    kueue_reason="Pending",
    kueue_message="couldn't assign flavors to pod set main: insufficient unused quota for "
    "gpu-portal.io/gpu-slices in flavor a100-80gb, 3 more needed",
    priority_values=PRIORITIES,
    allowed_priorities=("gpu-high", "gpu-low"),
)


def test_only_queued_preempted_and_stuck_pending_work_waits():
    assert is_waiting("queued", "Pending") and is_waiting("preempted", "Preempted")
    assert is_waiting("pending", "Unschedulable") and is_waiting("pending", "FailedCreate")
    assert not is_waiting("pending", "Submitted") and not is_waiting("running", "Running")
    assert explain(replace(FULL, state="running")) is None


def test_the_teams_own_quota_is_full_with_which_workloads_in_slices():
    w = explain(FULL)
    assert w.code == "quota_full"
    assert w.reason.startswith(
        "The team's A100-80GB quota is full: 14 of 14 slices in use by train-a (1 × 3g), "
        "eval-b (4 × 1g) and prep (1 whole GPU)"
    )
    assert "lets no team borrow" in w.reason
    assert w.position == 3
    assert "3 more needed" in w.details  # Kueue's words kept, but not as the explanation
    assert "couldn't assign" not in w.reason


def test_the_same_in_class_units_counts_only_the_asked_class():
    facts = replace(
        FULL,
        unit=slices.UNIT_CLASS,
        granted={"a100-80gb-mig-3g.40gb": 1, "a100-80gb": 2},
    )
    w = explain(facts)
    assert w.code == "quota_full"
    assert w.reason.startswith(
        "The team's A100-80GB MIG 3g.40gb quota is full: 1 of 1 instance in use by "
        "train-a (1 × 3g.40gb);"
    )
    assert "eval-b" not in w.reason and "prep" not in w.reason


def test_borrowing_is_capped():
    # 1 unit per class: the widest is the whole GPU's, 7 slices of A100 (as the queue renders it)
    pools = {slug: PoolPolicy(1) for slug in SHAPES}
    holders = (*HOLDERS, Holder("big", "gpu-low", {"a100-80gb": 2}))  # 14 borrowed
    others = (TeamUse({"a100-80gb": 10}, {}),)  # plenty idle
    w = explain(replace(FULL, pools=pools, holders=holders, others=others))
    assert w.code == "borrowing_capped"
    assert "borrowing is capped: the team may borrow 7 slices beyond its grant" in w.reason
    assert "already borrows 14" in w.reason


def test_nothing_idle_to_borrow_in_the_cohort():
    pools = {slug: PoolPolicy(None) for slug in SHAPES}
    others = (TeamUse({"a100-80gb": 2}, {"a100-80gb": 2}),)  # the other team uses its own
    w = explain(replace(FULL, pools=pools, others=others))
    assert w.code == "nothing_idle"
    assert "nothing is idle to borrow in the cohort" in w.reason
    # and the other team is never named: only the team's own workloads are
    assert "train-a" in w.reason


def test_some_idle_but_not_enough():
    pools = {slug: PoolPolicy(None) for slug in SHAPES}
    others = (TeamUse({"a100-80gb-mig-1g.10gb": 2}, {}),)  # 2 slices idle, 3 needed
    w = explain(replace(FULL, pools=pools, others=others))
    assert w.code == "nothing_idle"
    assert "leave only 2 slices idle to borrow, and this needs 3 more" in w.reason


def test_idle_units_within_the_limit_make_it_fit():
    pools = {slug: PoolPolicy(None) for slug in SHAPES}
    others = (TeamUse({"a100-80gb": 1}, {}),)
    w = explain(replace(FULL, pools=pools, others=others, kueue_message="", position=1))
    assert w.code == "in_queue" and "next in the team's queue" in w.reason


def _fleet(**free):
    """slug -> free units per node; a node's total is what it has free here plus 1 in use."""
    return {slug: Offer(tuple(units), sum(units) + 1) for slug, units in free.items()}


def test_no_node_has_the_shape_it_asks():
    facts = replace(
        FULL,
        ask={"a100-80gb-mig-4g.40gb": 1},
        holders=(),
        fleet=_fleet(**{"a100-80gb-mig-4g.40gb": [0, 0], "a100-80gb-mig-3g.40gb": [1]}),
        kueue_message="",
    )
    w = explain(facts)
    assert w.code == "no_shape"
    assert w.reason == (
        "No free A100-80GB MIG 4g.40gb instance exists now in the fleet: the only one is in use."
    )
    assert any("1 × A100-80GB MIG 3g.40gb per pod (of the same model)" in h for h in w.hints)


def test_a_shape_the_fleet_does_not_have_at_all():
    facts = replace(FULL, ask={"a100-80gb-mig-4g.40gb": 1}, holders=(), fleet={})
    w = explain(facts)
    assert w.code == "no_shape" and "no A100-80GB MIG 4g.40gb instance now" in w.reason


def test_a_pod_needs_its_units_on_one_node():
    facts = replace(
        FULL,
        ask={"a100-80gb": 4},
        granted={"a100-80gb": 8},
        holders=(),
        fleet=_fleet(**{"a100-80gb": [2, 2]}),
        kueue_message="",
    )
    w = explain(facts)
    assert w.code == "no_shape"
    assert "No node has 4 A100-80GB GPUs free at once" in w.reason
    assert "A smaller ask fits now: 2 × A100-80GB whole GPU instead of 4." in w.hints


def test_another_model_the_team_has_free_quota_of():
    facts = replace(
        FULL,
        ask={"a100-80gb": 1},
        granted={"a100-80gb": 2, "h100-80gb": 1},
        fleet=_fleet(**{"a100-80gb": [0], "h100-80gb": [1]}),
    )
    w = explain(facts)
    assert w.code == "quota_full"
    assert any("1 × H100-80GB whole GPU per pod (another model)" in h for h in w.hints)


def test_a_smaller_ask_that_fits_the_free_quota():
    holders = (Holder("train-a", "gpu-low", {"a100-80gb-mig-1g.10gb": 12}),)  # 2 of 14 free
    facts = replace(FULL, ask={"a100-80gb-mig-1g.10gb": 4}, holders=holders)
    w = explain(facts)
    assert "has 2 of 14 slices free and this asks for 4" in w.reason
    assert "A smaller ask fits now: 2 × A100-80GB MIG 1g.10gb instead of 4." in w.hints


def test_fewer_replicas_of_a_deployment():
    holders = (Holder("train-a", "gpu-low", {"a100-80gb-mig-3g.40gb": 2}),)  # 8 of 14 free
    facts = replace(
        FULL, ask={"a100-80gb-mig-3g.40gb": 1}, pods=4, holders=holders, kind="deployment"
    )
    w = explain(facts)
    assert "A smaller ask fits now: 2 replicas instead of 4." in w.hints


def test_a_smaller_ask_on_borrowed_units_says_they_are_taken_back():
    pools = {slug: PoolPolicy(None) for slug in SHAPES}
    others = (TeamUse({"a100-80gb-mig-1g.10gb": 2}, {}),)
    facts = replace(FULL, ask={"a100-80gb-mig-1g.10gb": 3}, pools=pools, others=others)
    w = explain(facts)
    assert any("2 × A100-80GB MIG 1g.10gb" in h and "take back" in h for h in w.hints)


def test_a_higher_priority_takes_the_place_of_the_teams_lower_priority_work():
    w = explain(FULL)
    assert (
        "At gpu-high it would take the place of the team's lower-priority work "
        "(train-a, eval-b and prep), which would wait instead." in w.hints
    )
    # at gpu-high already, with the team's own work at gpu-high too: nothing to raise to
    high = tuple(replace(h, priority="gpu-high") for h in HOLDERS)
    w = explain(replace(FULL, priority="gpu-high", holders=high))
    assert not any(h.startswith("At ") for h in w.hints)


def test_waiting_its_turn_in_the_queue():
    facts = replace(FULL, holders=(), kueue_message="", position=4)
    w = explain(facts)
    assert w.code == "in_queue" and w.reason.startswith("It is number 4 in the team's queue")
    assert w.hints == ["At gpu-high it would go before the team's gpu-low work in the queue."]


def test_over_budget_holds_the_queue():
    w = explain(replace(FULL, queue_held=True))
    assert w.code == "over_budget" and "over its budget" in w.reason
    assert w.position == 3 and "budget" in w.hints[0]


def test_a_suspended_team_comes_before_anything_else():
    w = explain(replace(FULL, team_active=False, queue_held=True))
    assert w.code == "suspended" and w.reason.startswith("The team is suspended")


def test_kueue_says_more_than_the_portal_knows():
    fits = replace(FULL, holders=())
    assert explain(fits).code == "quota"  # Kueue's insufficient quota, the portal lags
    held = replace(fits, kueue_message="LocalQueue tenant-a/gpu is stopped")
    assert explain(held).code == "queue_inactive"


def test_a_stuck_pending_pod():
    facts = replace(FULL, state="pending", kueue_reason="Unschedulable", holders=(), position=2)
    facts = replace(facts, kueue_message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu")
    w = explain(facts)
    assert w.code == "no_shape" and w.position is None and "Insufficient" in w.details


STUCK = replace(FULL, state="pending", holders=(), position=None)


@pytest.mark.parametrize(
    ("reason", "message", "code", "words"),
    [
        (
            "Unschedulable",
            "0/5 nodes are available: pod has unbound immediate PersistentVolumeClaims. "
            "preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling.",
            "volume_unbound",
            "not bound",
        ),
        (
            "Unschedulable",
            '0/5 nodes are available: persistentvolumeclaim "scratch" not found.',
            "volume_missing",
            "scratch",
        ),
        (
            "CreateContainerConfigError",
            'secret "hf-token" not found',
            "config_missing",
            "Secret hf-token",
        ),
        ("ImagePullBackOff", 'Back-off pulling image "trian:1"', "image", "cannot be pulled"),
        (
            "Unschedulable",
            "0/5 nodes are available: 5 node(s) didn't match Pod's node affinity/selector.",
            "node_selector",
            "node selector",
        ),
    ],
)
def test_the_pods_own_reason_is_read_before_any_guess(reason, message, code, words):
    """A notebook waiting on its volume claim is not told the nodes are busy, nor advised to
    ask for a whole GPU."""
    w = explain(replace(STUCK, kueue_reason=reason, kueue_message=message))
    assert w.code == code and words in w.reason
    assert "busy" not in w.reason and not any("Free now" in h for h in w.hints)
    assert w.details == message  # the cluster's own words stay beside


def test_a_gang_half_placed_waits_and_says_how_many_of_its_pods_run():
    short = (
        "1 of 2 pods running; the job waits until every pod is placed: Unschedulable "
        "(0/5 nodes are available: 5 Insufficient nvidia.com/mig-1g.10gb.)"
    )
    assert is_waiting("pending", "GangIncomplete")
    w = explain(replace(STUCK, kueue_reason="GangIncomplete", kueue_message=short))
    assert w.code == "gang_unplaced" and w.reason.startswith("1 of its 2 pods run")
    on_a_claim = short.replace(
        "5 Insufficient nvidia.com/mig-1g.10gb.",
        "pod has unbound immediate PersistentVolumeClaims.",
    )
    w = explain(replace(STUCK, kueue_reason="GangIncomplete", kueue_message=on_a_claim))
    assert w.code == "volume_unbound" and w.reason.startswith("1 of its 2 pods run")
    # the nodes lack GPUs: the fleet's reading, as before
    busy = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu"
    assert explain(replace(STUCK, kueue_reason="Unschedulable", kueue_message=busy)).code == (
        "no_shape"
    )


def test_a_preempted_workload_says_so_first():
    w = explain(replace(FULL, state="preempted", kueue_reason="Preempted"))
    assert w.reason.startswith("It was preempted") and "quota is full" in w.reason


@pytest.mark.parametrize("n", [6, 9])
def test_many_holders_are_counted_not_all_named(n):
    holders = tuple(Holder(f"w{i}", "gpu-low", {"a100-80gb-mig-1g.10gb": 1}) for i in range(n))
    facts = replace(FULL, granted={"a100-80gb-mig-1g.10gb": n}, holders=holders)
    w = explain(facts)
    assert f"{n - 5} more" in w.reason and "w4 (1 × 1g)" in w.reason and "w5 (" not in w.reason


# --- Kueue v0.19's own reasons (UnadmittedWorkloadsObservability) ---------------------------------


def test_kueue_says_it_exceeds_what_the_queue_can_ever_admit():
    """Before the team's holders: freeing them would not help."""
    w = explain(replace(FULL, kueue_reason="ExceedsMaxQuota", kueue_message="exceeds max quota"))
    assert w.code == "exceeds_max"
    assert w.reason.startswith("It asks for more A100-80GB than the team's queue can ever admit")
    assert w.hints[-1] == "Ask for less, or ask for a larger grant." and w.details


def test_kueue_says_no_flavor_matches():
    w = explain(replace(FULL, holders=(), kueue_reason="NoMatchingFlavor", kueue_message="x"))
    assert w.code == "no_flavor" and "none of the team's flavors" in w.reason
    assert "GPU model the team's grant covers" in w.hints[0]


@pytest.mark.parametrize(
    "reason, code, words",
    [
        ("WaitingForPodsReady", "pods_ready", "until the pods of the work it admitted last"),
        ("WaitingForPreemptedWorkloads", "making_room", "the work it preempted is stopping"),
        ("Suspended", "queue_inactive", "not admitting work right now"),
        ("Misconfigured", "misconfigured", "missing or misconfigured"),
        ("TopologyPlacementFailed", "no_shape", "no place in the fleet's topology"),
    ],
)
def test_kueue_reasons_that_are_not_about_the_teams_quota(reason, code, words):
    w = explain(replace(FULL, kueue_reason=reason, kueue_message="Kueue's words"))
    assert (w.code, w.details) == (code, "Kueue's words") and words in w.reason


def test_waiting_for_quota_still_names_the_teams_holders():
    w = explain(replace(FULL, kueue_reason="WaitingForQuota"))
    assert w.code == "quota_full" and "in use by train-a" in w.reason
    lagging = explain(replace(FULL, holders=(), kueue_reason="WaitingForQuota", kueue_message=""))
    assert lagging.code == "quota" and "Kueue counts less A100-80GB free" in lagging.reason


def test_what_kueue_cannot_know_stays_in_the_portals_words():
    """Kueue sees a stopped queue; the portal knows it is the budget, or a suspended team."""
    stopped = replace(FULL, kueue_reason="Suspended")
    assert explain(replace(stopped, queue_held=True)).code == "over_budget"
    assert explain(replace(stopped, team_active=False)).code == "suspended"
