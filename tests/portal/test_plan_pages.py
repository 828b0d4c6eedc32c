"""Plan pages of the platform console (no cluster: the inventory is made by hand)."""

from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from catalog.services import ensure_resource_classes
from scheduler.cluster.models import Node
from scheduler.mig import proposals
from scheduler.mig.models import MigConfig, Plan
from tenants.models import AuditEvent
from tests.scheduler.factories import NodeFactory, PodAllocationFactory
from tests.tenants.factories import QuotaGrantFactory

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
    from catalog.models import ResourceClass

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
    plan = proposals.create_plan(actor=fleet.admin)
    client.force_login(fleet.admin)
    with mock.patch("scheduler.tasks.apply_plan.delay") as delay:
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(f"/console/plans/{plan.pk}/apply/", {"node": "node-b"})
    assert response.status_code == 302
    delay.assert_called_once_with(plan_id=plan.pk, nodes=["node-b"], actor_id=fleet.admin.pk)


def test_failed_rollout_says_where(client, fleet):
    plan = proposals.create_plan(actor=fleet.admin)
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
    from catalog.models import ResourceClass

    client.force_login(fleet.member)
    rc = ResourceClass.objects.get(slug="a100-80gb-mig-1g.10gb")
    from catalog.models import Pool

    Pool.objects.filter(resource_class=rc).update(capacity=7)
    # advice names only what a pool has (issue 35, 11): the shared replicas have one here
    Pool.objects.filter(resource_class__slug="a100-80gb-shared").update(capacity=4)
    body = client.get(
        "/teams/team-a/ask/preview/", {"resource_class": rc.pk, "amount": 1, "workload": "training"}
    ).content.decode()
    assert "mps" in body and "inference" not in body
    assert "whole" not in body  # no pool of whole A100s: not advised


@pytest.fixture
def queued(monkeypatch):
    """The rollout task's queue call, recorded instead of sent (the rollout itself is tested on
    the cluster, in tests/scheduler/test_rollout*.py)."""
    from scheduler.mig import tasks

    calls: list[dict] = []
    monkeypatch.setattr(tasks.apply_plan, "delay", lambda **kwargs: calls.append(kwargs))
    return calls


def test_only_platform_admins_may_make_or_apply_plans_whoever_calls(
    fleet, queued, django_capture_on_commit_callbacks
):
    from core.errors import Forbidden
    from scheduler.mig import orders
    from tests.tenants.factories import UserFactory

    staff = UserFactory(username="staff", is_staff=True)  # staff, not in the admins' group
    for someone in (fleet.member, fleet.owner, staff, None):
        with pytest.raises(Forbidden):
            proposals.create_plan(actor=someone)
    assert not Plan.objects.exists() and not AuditEvent.objects.exists()
    plan = proposals.create_plan(actor=fleet.admin)
    for someone in (fleet.member, staff, None):
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            with pytest.raises(Forbidden):
                orders.request_plan_apply(actor=someone, plan=plan, nodes=["node-b"])
        assert callbacks == []
    assert queued == []
    assert list(AuditEvent.objects.values_list("verb", flat=True)) == ["plan.proposed"]
    plan.refresh_from_db()
    assert plan.status == Plan.Status.PROPOSED


def test_an_admins_apply_writes_one_event_and_queues_one_task_on_commit(
    fleet, queued, django_capture_on_commit_callbacks
):
    from scheduler.mig import orders

    plan = proposals.create_plan(actor=fleet.admin)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        orders.request_plan_apply(actor=fleet.admin, plan=plan)
        assert queued == []  # nothing leaves before the commit
    assert len(callbacks) == 1
    callbacks[0]()
    assert queued == [{"plan_id": plan.pk, "nodes": None, "actor_id": fleet.admin.pk}]
    event = AuditEvent.objects.get(verb="plan.apply_requested")
    assert (event.actor, event.object_id) == (fleet.admin, str(plan.pk))
    assert event.after == {"nodes": "all", "pending": ["node-b"]}


def test_apply_is_refused_while_applying_for_unknown_nodes_and_when_done(
    fleet, queued, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    from core.errors import InvalidInput, InvalidTransition
    from scheduler.mig import orders

    plan = proposals.create_plan(actor=fleet.admin)
    refusals = [
        (InvalidInput, ["node-a"]),  # in the plan, but unchanged
        (InvalidInput, ["node-z"]),
    ]
    for error, nodes in refusals:
        with django_capture_on_commit_callbacks(execute=True), pytest.raises(error):
            orders.request_plan_apply(actor=fleet.admin, plan=plan, nodes=nodes)
    Plan.objects.filter(pk=plan.pk).update(status=Plan.Status.APPLYING, started_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(InvalidTransition):
        orders.request_plan_apply(actor=fleet.admin, plan=plan)
    done = [{**e, "state": "applied"} if e["changed_gpus"] else e for e in plan.nodes]
    Plan.objects.filter(pk=plan.pk).update(status=Plan.Status.APPLIED, nodes=done)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(InvalidTransition):
        orders.request_plan_apply(actor=fleet.admin, plan=plan)
    assert queued == [] and not AuditEvent.objects.filter(verb="plan.apply_requested").exists()
    # A rollout whose worker died may be taken up again.
    Plan.objects.filter(pk=plan.pk).update(
        status=Plan.Status.APPLYING, started_at=timezone.now() - timedelta(hours=1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        orders.request_plan_apply(actor=fleet.admin, plan=plan)
    assert len(queued) == 1


def test_the_console_says_why_an_apply_was_refused(client, fleet, queued):
    plan = proposals.create_plan(actor=fleet.admin)
    Plan.objects.filter(pk=plan.pk).update(status=Plan.Status.APPLYING)
    client.force_login(fleet.admin)
    response = client.post(f"/console/plans/{plan.pk}/apply/", follow=True)
    assert f"plan #{plan.pk} is being applied already" in response.content.decode()
    assert queued == []
    client.force_login(fleet.member)
    assert client.post(f"/console/plans/{plan.pk}/apply/").status_code == 403
    assert queued == []


def test_the_rollout_refuses_whoever_is_not_a_platform_admin(fleet):
    """The task (and the rollout under it) checks the actor again: a task queued by anyone
    else, or with no actor, touches neither the plan nor the cluster."""
    from core.errors import Forbidden
    from scheduler.mig import rollout, tasks

    plan = proposals.create_plan(actor=fleet.admin)
    for kwargs in ({"plan_id": plan.pk}, {"plan_id": plan.pk, "actor_id": fleet.member.pk}):
        assert tasks.apply_plan.apply(kwargs=kwargs).get().startswith("refused")
    with pytest.raises(Forbidden):
        rollout.apply_plan(None, plan.pk, actor=fleet.member)  # never reaches the gateway
    plan.refresh_from_db()
    assert plan.status == Plan.Status.PROPOSED
    assert list(AuditEvent.objects.values_list("verb", flat=True)) == ["plan.proposed"]


def test_a_stuck_rollout_offers_to_resume_and_a_running_one_does_not(client, fleet):
    from datetime import timedelta

    from django.utils import timezone

    plan = proposals.create_plan(actor=fleet.admin)
    client.force_login(fleet.admin)
    Plan.objects.filter(pk=plan.pk).update(status=Plan.Status.APPLYING, started_at=timezone.now())
    body = client.get(f"/console/plans/{plan.pk}/").content.decode()
    assert "Rollout in progress" in body and "Apply all changed nodes" not in body
    assert "Resume the rollout" not in body and "Abandon the rollout" in body
    # a long rollout whose worker still beats is not stuck
    Plan.objects.filter(pk=plan.pk).update(
        started_at=timezone.now() - timedelta(hours=1), heartbeat_at=timezone.now()
    )
    body = client.get(f"/console/plans/{plan.pk}/").content.decode()
    assert "Rollout in progress" in body and "Resume the rollout" not in body
    Plan.objects.filter(pk=plan.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=10))
    body = client.get(f"/console/plans/{plan.pk}/").content.decode()
    assert "resume it now or abandon it" in body
    assert "Resume the rollout" in body and "Abandon the rollout" in body


def test_the_console_abandons_a_rollout_and_says_which_nodes_stay_cordoned(client, fleet):
    plan = proposals.create_plan(actor=fleet.admin)
    nodes = plan.nodes
    nodes[0]["cordoned"] = True
    Plan.objects.filter(pk=plan.pk).update(status=Plan.Status.APPLYING, nodes=nodes)
    client.force_login(fleet.admin)
    response = client.post(f"/console/plans/{plan.pk}/abandon/", follow=True)
    body = response.content.decode()
    plan.refresh_from_db()
    assert plan.status == Plan.Status.ABANDONED
    assert plan.error == f"abandoned by {fleet.admin.username}; still cordoned: {nodes[0]['node']}"
    assert "Rollout abandoned" in body and "apply again to go on" in body
    event = AuditEvent.objects.get(verb="plan.abandoned")
    assert event.after["cordoned"] == [nodes[0]["node"]]
    # twice: a clear refusal, nothing changes
    response = client.post(f"/console/plans/{plan.pk}/abandon/", follow=True)
    assert "not being applied: nothing to abandon" in response.content.decode()
    assert AuditEvent.objects.filter(verb="plan.abandoned").count() == 1
    # a team owner may not
    client.force_login(fleet.owner)
    assert client.post(f"/console/plans/{plan.pk}/abandon/").status_code == 403


def test_an_elastic_plan_says_who_made_it_and_why(client, fleet):
    from django.core.exceptions import PermissionDenied

    from scheduler.mig import elastic, reshaping, rollout

    configs, dp = proposals.known_mig_configs(), proposals.known_device_plugin_configs()
    gpus, labels = proposals.fleet_from_inventory(configs, dp)
    waiting = [elastic.WaitingAsk("a100-80gb-mig-2g.20gb", 1, 900)]
    decision = elastic.decide(gpus, waiting, elastic.ElasticPolicy(min_wait_s=600))
    plan = reshaping._propose(decision, "A100-80GB", (gpus, labels, configs, dp))
    assert {e["node"]: e["changed_gpus"] for e in plan.changed_nodes} == {"node-b": [0]}
    client.force_login(fleet.admin)
    body = client.get(f"/console/plans/{plan.pk}/").content.decode()
    assert "Made by elastic layouts" in body and "node-b GPU 0" in body
    assert "elastic layouts" in client.get("/console/plans/").content.decode()
    # The controller applies its own plans only, never a person's.
    manual = proposals.create_plan(actor=fleet.admin)
    with pytest.raises(PermissionDenied):
        rollout.begin(mock.Mock(), manual.pk, controller=reshaping.CONTROLLER)
    assert Plan.objects.get(pk=manual.pk).status == Plan.Status.PROPOSED


def test_capacity_map_marks_the_gpus_a_plan_re_shapes_with_who_and_why(client, fleet):
    plan = proposals.create_plan(actor=fleet.admin)
    changed = [n for n in plan.nodes if n["changed_gpus"]]
    assert changed, "the fleet's plan changes a node"
    node = changed[0]
    plan.status, plan.started_at = Plan.Status.APPLYING, timezone.now()
    plan.policy = {
        **plan.policy,
        "controller": "elastic layouts",
        "reason": "3g.40gb demand waited 40 min",
    }
    plan.save()
    client.force_login(fleet.admin)
    body = client.get("/console/capacity/").content.decode()
    gpus = ", ".join(str(g) for g in node["changed_gpus"])
    assert "now by elastic layouts</a> <small>3g.40gb demand waited 40 min</small>" in body
    assert f"re-shaping GPU{'s' if len(node['changed_gpus']) > 1 else ''} {gpus} now" in body
    assert f"↻ GPU {node['changed_gpus'][0]}" in body
    assert f'href="/console/plans/{plan.pk}/"' in body

    # applied over an hour ago: no longer marked
    plan.status = Plan.Status.APPLIED
    plan.finished_at = timezone.now() - timedelta(hours=2)
    plan.save()
    later = client.get("/console/capacity/").content.decode()
    assert "↻ GPU" not in later and "by elastic layouts</a>" not in later
