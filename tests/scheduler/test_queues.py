"""Queue summaries from Kueue's ClusterQueues are pure: own, borrowed and lent per team."""

from scheduler.cluster.queues import lending, shares, summarise

MIG = "nvidia.com/mig-3g.40gb"


def cq(slug, nominal, total=0, borrowed=0, lend=True, pending=0, admitted=0):
    resource = {"name": MIG, "nominalQuota": str(nominal), "borrowingLimit": "4"}
    if not lend:
        resource["lendingLimit"] = "0"
    return {
        "metadata": {"name": f"tenant-{slug}", "labels": {"gpu-portal.io/tenant": slug}},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "gpu-portal-default",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": "memory", "nominalQuota": "256Gi"},
                            ],
                        }
                    ],
                },
                {
                    "coveredResources": [MIG],
                    "flavors": [{"name": "h100-80gb", "resources": [resource]}],
                },
            ]
        },
        "status": {
            "flavorsUsage": [
                {
                    "name": "h100-80gb",
                    "resources": [{"name": MIG, "total": str(total), "borrowed": str(borrowed)}],
                },
                {"name": "gpu-portal-default", "resources": [{"name": "cpu", "total": "2"}]},
            ],
            "pendingWorkloads": pending,
            "admittedWorkloads": admitted,
            "conditions": [{"type": "Active", "status": "True", "message": "Can admit"}],
        },
    }


def test_a_borrower_and_its_lender():
    out = summarise([cq("a", 4, total=1), cq("b", 0, total=2, borrowed=2, pending=1, admitted=1)])
    assert out["a"]["lines"] == [
        {"flavor": "h100-80gb", "resource": MIG, "nominal": 4, "used": 1, "borrowed": 0, "lent": 2}
    ]
    assert out["b"]["lines"] == [
        {"flavor": "h100-80gb", "resource": MIG, "nominal": 0, "used": 2, "borrowed": 2, "lent": 0}
    ]
    assert (out["b"]["pending"], out["b"]["admitted"], out["b"]["active"]) == (1, 1, True)
    assert out["a"]["queue"] == "tenant-a"


def test_borrowed_units_are_shared_out_over_lenders_by_their_idle_units():
    out = summarise(
        [cq("a", 4), cq("c", 2), cq("n", 6, lend=False), cq("b", 0, total=3, borrowed=3)]
    )
    lent = {slug: s["lines"][0]["lent"] for slug, s in out.items() if s["lines"]}
    assert lent == {"a": 2, "c": 1, "n": 0, "b": 0}


def test_a_queue_kueue_has_not_seen_is_inactive():
    fresh = cq("a", 1)
    fresh["status"] = {}
    summary = summarise([fresh])["a"]
    assert summary["active"] is False and summary["reason"] == "Kueue has not seen it"
    assert summary["lines"][0]["used"] == 0


# --- borrowing adds up (issue 35, 8) -------------------------------------------------------------


def test_what_lenders_lend_adds_up_to_what_is_borrowed():
    # two lenders with 2 idle each, 3 borrowed: floors alone said 1 + 1 = 2 lent
    out = summarise([cq("a", 2), cq("c", 2), cq("b", 0, total=3, borrowed=3)])
    lent = {slug: s["lines"][0]["lent"] for slug, s in out.items() if s["lines"]}
    assert lent["a"] + lent["c"] == 3 and sorted([lent["a"], lent["c"]]) == [1, 2]


def test_shares_are_whole_capped_by_each_weight_and_add_up():
    assert shares(3, {"a": 2, "c": 2}) == {"a": 2, "c": 1}
    assert shares(10, {"a": 2, "c": 3}) == {"a": 2, "c": 3}  # no more than is idle
    assert shares(0, {"a": 2}) == {"a": 0}
    assert sum(shares(7, {"a": 1, "b": 1, "c": 1, "d": 5}).values()) == 7


def test_lending_says_who_borrows_and_whose_units_they_are():
    statuses = summarise([cq("a", 4), cq("b", 0, total=2, borrowed=2)])
    assert lending(statuses) == {("h100-80gb", MIG): {"borrowers": {"b": 2}, "lenders": {"a": 2}}}
