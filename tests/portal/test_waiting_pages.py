"""Why a waiting workload waits, on its page and in the API (issue 29, item 6), from the
database: the reason names the team's own workloads and never another team's."""

from decimal import Decimal
from html import unescape

import pytest
from django.urls import reverse

from scheduler.workloads.models import Workload
from scheduler.workloads.selectors import waiting_facts, waiting_for
from tenants import hooks
from tests.portal.api.conftest import session
from tests.scheduler.factories import NodeFactory, PodAllocationFactory, WorkloadFactory
from tests.tenants.factories import (
    MembershipFactory,
    PoolFactory,
    QuotaGrantFactory,
    ResourceClassFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

KUEUE_SAYS = (
    "couldn't assign flavors to pod set main: insufficient unused quota for "
    "gpu-portal.io/gpu-slices in flavor a100-80gb, 6 more needed"
)


@pytest.fixture
def full(world):
    """team-a's A100 quota (2 × 3g, 6 slices) is held by train-a; team-b uses all of its own,
    so nothing is idle; team-a has an H100 free, and the fleet has one free now."""
    h100 = ResourceClassFactory(
        slug="h100-80gb",
        gpu_model="H100-80GB",
        kind="whole",
        profile="",
        resource_name="nvidia.com/gpu",
        gpu_fraction=Decimal("1"),
        memory_gb=80,
    )
    PoolFactory(resource_class=h100, capacity=4)
    world.pool.borrowing_limit = None  # the product's default: borrow what is idle
    world.pool.save()
    QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, amount=2)
    QuotaGrantFactory(tenant=world.tenant, resource_class=h100, amount=1)
    QuotaGrantFactory(tenant=world.other_tenant, resource_class=world.rc, amount=2)
    a100 = {world.rc.slug: 2}
    WorkloadFactory(tenant=world.tenant, name="train-a", state="running", resources=a100)
    WorkloadFactory(tenant=world.other_tenant, name="secret-b", state="running", resources=a100)
    waits = WorkloadFactory(
        tenant=world.tenant,
        name="eval-c",
        state=Workload.State.QUEUED,
        reason="Pending",
        message=KUEUE_SAYS,
        queue_position=2,
        resources={world.rc.slug: 1},
    )
    NodeFactory(name="a100-0", allocatable={"nvidia.com/mig-3g.40gb": 4})
    PodAllocationFactory(node_name="a100-0", resources={"nvidia.com/mig-3g.40gb": 4})
    NodeFactory(
        name="h100-0",
        gpu_model="H100-80GB",
        gpu_product="NVIDIA-H100-80GB-HBM3",
        mig_config="all-disabled",
        allocatable={"nvidia.com/gpu": 1},
    )
    return waits


REASON = (
    "The team's A100-80GB quota is full: 6 of 6 slices in use by train-a (2 × 3g); "
    "nothing is idle to borrow in the cohort"
)


def test_the_page_says_why_it_waits_and_what_would_get_it_in_sooner(client, world, full):
    client.force_login(world.member)
    body = client.get(reverse("scheduler:workload_detail", args=[full.pk])).content.decode()
    body = unescape(body)
    assert "Why it waits" in body and REASON in body
    assert "position 2 in" in body
    assert "1 × H100-80GB whole GPU per pod (another model)" in body
    assert "At gpu-high it would take the place of the team's lower-priority work" in body
    assert "6 more needed" in body  # Kueue's words, under the details
    assert "secret-b" not in body
    # the polled state block says the same
    state = client.get(reverse("scheduler:workload_state", args=[full.pk])).content.decode()
    assert REASON in unescape(state)


def test_the_api_answers_a_waiting_object(world, full):
    body = session(world.viewer).get(f"/api/v1/workloads/{full.pk}/").json()
    waiting = body["waiting"]
    assert waiting["code"] == "nothing_idle"
    assert waiting["reason"].startswith(REASON)
    assert waiting["position"] == 2
    assert any("H100-80GB" in h for h in waiting["hints"])
    assert waiting["details"] == KUEUE_SAYS
    assert "secret-b" not in str(body)
    listed = session(world.viewer).get("/api/v1/workloads/").json()["results"]
    assert all("waiting" not in w for w in listed)  # the detail's alone


def test_a_running_workload_is_not_waiting(world, full):
    running = Workload.objects.get(name="train-a")
    assert session(world.member).get(f"/api/v1/workloads/{running.pk}/").json()["waiting"] is None


def test_another_team_never_reads_it_and_its_own_names_only_its_own(world, full):
    assert session(world.outsider).get(f"/api/v1/workloads/{full.pk}/").status_code == 404
    theirs = WorkloadFactory(
        tenant=world.other_tenant,
        name="wait-b",
        state=Workload.State.QUEUED,
        resources={world.rc.slug: 1},
    )
    waiting = session(world.outsider).get(f"/api/v1/workloads/{theirs.pk}/").json()["waiting"]
    assert "secret-b (2 × 3g)" in waiting["reason"]
    assert "train-a" not in str(waiting) and "eval-c" not in str(waiting)


def test_a_suspended_team_and_a_held_queue(world, full, monkeypatch):
    monkeypatch.setattr(hooks.queue_holds, "_impl", lambda ids: set(ids))
    assert waiting_for(Workload.objects.get(pk=full.pk)).code == "over_budget"
    world.tenant.status = "suspended"
    world.tenant.save()
    waiting = session(world.member).get(f"/api/v1/workloads/{full.pk}/").json()["waiting"]
    assert waiting["code"] == "suspended" and waiting["reason"].startswith("The team is suspended")


def test_no_free_shape_in_the_fleet(world, full):
    Workload.objects.filter(name="train-a").update(state="succeeded")  # the quota is free
    waiting = waiting_for(Workload.objects.get(pk=full.pk))
    assert waiting.code == "no_shape"
    assert waiting.reason.startswith(
        "No free A100-80GB MIG 3g.40gb instance exists now in the fleet: all 4 are in use."
    )


def test_the_inputs_are_read_in_a_fixed_number_of_queries(world, full, django_assert_num_queries):
    for i in range(4):  # more of the team's work, another team's, more nodes: no more queries
        WorkloadFactory(tenant=world.tenant, name=f"more-{i}", state="running")
        WorkloadFactory(tenant=world.other_tenant, name=f"theirs-{i}", state="pending")
        NodeFactory(name=f"extra-{i}")
    workload = Workload.objects.get(pk=full.pk)
    # the tenant, the classes with their pools, the grants, the work holding quota, the
    # nodes, their pods
    with django_assert_num_queries(6):
        facts = waiting_facts(workload)
    assert {h.name for h in facts.holders} == {"train-a", *(f"more-{i}" for i in range(4))}


def test_a_viewer_sees_the_same_reason_as_a_member(client, world, full):
    viewer = UserFactory(username="watcher")
    MembershipFactory(tenant=world.tenant, user=viewer, role="viewer")
    client.force_login(viewer)
    body = client.get(reverse("scheduler:workload_detail", args=[full.pk])).content.decode()
    body = unescape(body)
    assert REASON in body


def test_an_ask_of_a_class_the_catalog_no_longer_has_still_answers(world, full):
    Workload.objects.filter(pk=full.pk).update(resources={"no-such-class": 2})
    response = session(world.member).get(f"/api/v1/workloads/{full.pk}/")
    assert response.status_code == 200
    waiting = response.json()["waiting"]
    assert waiting["code"] == "quota_full" and "no no-such-class quota" in waiting["reason"]
    # and units no admission would write are skipped, not a crash
    Workload.objects.filter(pk=full.pk).update(resources={world.rc.slug: "two", "x": True})
    assert waiting_for(Workload.objects.get(pk=full.pk)).code == "quota"
