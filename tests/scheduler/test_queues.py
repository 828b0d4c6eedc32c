"""Queue summaries from Kueue's ClusterQueues are pure: own, borrowed and lent per team."""

from scheduler.cluster.queues import summarise

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
