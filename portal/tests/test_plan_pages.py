"""Plan pages of the platform console (no cluster: the inventory is made by hand)."""

from unittest import mock

import pytest

from scheduler import planning
from scheduler.models import MigConfig, Node, Plan
from scheduler.services import ensure_resource_classes
from scheduler.tests.factories import NodeFactory, PodAllocationFactory
from tenants.models import AuditEvent
from tenants.tests.factories import QuotaGrantFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(world):
    """Two one-GPU A100 nodes in all-1g.10gb, the first with a pod on one 1g; demand for 2g."""
    ensure_resource_classes(["A100-80GB"])
    for name in ("node-a", "node-b"):
        NodeFactory(
            name=name,
            gpu_count=1,
            mig_config="all-1g.10gb",
            allocatable={"nvidia.com/mig-1g.10gb": 7},
        )
    PodAllocationFactory(node_name="node-a", tenant=world.tenant, pod_name="infer")
    from scheduler.models import ResourceClass

    QuotaGrantFactory(
        tenant=world.tenant,
        resource_class=ResourceClass.objects.get(slug="a100-80gb-mig-2g.20gb"),
        amount=3,
    )
    return world


def test_only_platform_admins_see_plans(client, fleet):
    client.force_login(fleet.member)
    assert client.get("/console/plans/").status_code == 403
    assert client.post("/console/plans/new/").status_code == 403


def test_make_a_plan_and_see_today_next_to_proposed(client, fleet):
    client.force_login(fleet.admin)
    page = client.get("/console/plans/")
    assert page.status_code == 200 and "Make plan" in page.content.decode()
    response = client.post("/console/plans/new/", {})
    plan = Plan.objects.get()
    assert response.status_code == 302 and response.url == f"/console/plans/{plan.pk}/"
    # The busy GPU (node-a) is left alone; node-b becomes 3 x 2g.
    changed = {e["node"]: e["changed_gpus"] for e in plan.nodes}
    assert changed == {"node-a": [], "node-b": [0]}
    assert plan.summary["unserved"] == {}
    body = client.get(f"/console/plans/{plan.pk}/").content.decode()
    assert "Today" in body and "Proposed" in body
    assert body.count("<svg") == 4  # two nodes, today and proposed
    assert "2g.20gb" in body and "team-a" in body
    assert "Apply all changed nodes" in body and "Apply node-b only" in body
    assert AuditEvent.objects.filter(verb="plan.proposed").exists()


def test_apply_queues_the_rollout_for_one_node(client, fleet, django_capture_on_commit_callbacks):
    plan = planning.make_plan(actor=fleet.admin)
    client.force_login(fleet.admin)
    with mock.patch("scheduler.tasks.apply_plan.delay") as delay:
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(f"/console/plans/{plan.pk}/apply/", {"node": "node-b"})
    assert response.status_code == 302
    delay.assert_called_once_with(plan_id=plan.pk, nodes=["node-b"], actor_id=fleet.admin.pk)


def test_failed_rollout_says_where(client, fleet):
    plan = planning.make_plan(actor=fleet.admin)
    plan.status, plan.failed_node, plan.error = (
        Plan.Status.FAILED,
        "node-b",
        "mig.config=x failed: no",
    )
    plan.save()
    client.force_login(fleet.admin)
    body = client.get(f"/console/plans/{plan.pk}/").content.decode()
    assert "Rollout stopped at node <strong>node-b</strong>" in body
    assert "mig.config=x failed: no" in body


def test_capacity_map_draws_generated_configs(client, fleet):
    MigConfig.objects.create(
        name="portal-a100-80gb-0123456789",
        entries=[{"devices": [0], "mig-enabled": True, "mig-devices": {"4g.40gb": 1}}],
    )
    Node.objects.filter(name="node-b").update(mig_config="portal-a100-80gb-0123456789")
    client.force_login(fleet.admin)
    body = client.get("/console/capacity/").content.decode()
    assert "4g.40gb" in body


def test_request_hint_gives_sharing_advice(client, fleet):
    from scheduler.models import ResourceClass

    client.force_login(fleet.member)
    rc = ResourceClass.objects.get(slug="a100-80gb-mig-1g.10gb")
    from scheduler.models import Pool

    Pool.objects.filter(resource_class=rc).update(capacity=7)
    body = client.get(
        "/teams/team-a/ask/preview/", {"resource_class": rc.pk, "amount": 1, "workload": "training"}
    ).content.decode()
    assert "mps" in body and "inference" not in body
