"""Plan and apply against the local cluster: on fresh KWOK nodes only (never the seed nodes).

The demand is chosen so the proposed layout is `all-balanced` from the portal's file: the
simulator started with the cluster may predate reading published (generated) configs.
"""

import uuid

import pytest
from django.db.models import F

from catalog.models import Pool
from localcluster.fleet import node_manifest
from scheduler.cluster import inventory
from scheduler.cluster.models import Node
from scheduler.mig import planner, proposals, publishing, rollout
from scheduler.mig.models import Plan
from tenants.models import AuditEvent
from tenants.services import approvals as approval_services
from tests.scheduler.cluster_helpers import (
    celery_worker,
    node_ready,
    scheduled_pod_for,
    wait_for,
)
from tests.tenants.factories import (
    CapacityRequestFactory,
    CapacityRequestItemFactory,
    PlatformAdminFactory,
    TenantFactory,
)

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

TWO_G, THREE_G, ONE_G = (
    "a100-80gb-mig-2g.20gb",
    "a100-80gb-mig-3g.40gb",
    "a100-80gb-mig-1g.10gb",
)


@pytest.fixture
def plan_nodes(kube_admin):
    """Two fresh one-GPU A100 nodes in all-1g.10gb; deleted afterwards, with the ConfigMaps."""
    tag = uuid.uuid4().hex[:6]
    names = [f"plan-a-{tag}", f"plan-b-{tag}"]
    for name in names:
        kube_admin.create(
            node_manifest(
                {
                    "name": name,
                    "model": "A100-80GB",
                    "gpus": 1,
                    "migConfig": "all-1g.10gb",
                    "devicePluginConfig": "default",
                }
            )
        )
    for name in names:
        wait_for(f"{name} Ready", lambda n=name: node_ready(kube_admin, n))
    yield names
    for name in names:
        kube_admin.delete("Node", name)
    for kind in ("mig-parted", "device-plugin"):
        kube_admin.delete(
            "ConfigMap", publishing.config_map_name(kind), publishing.operator_namespace()
        )


def _approve(admin, items: dict[str, int]) -> None:
    """Approve asks the current layout cannot serve: the platform team counts on the re-layout
    for the capacity, so the pools are raised first (the next inventory sync resets them)."""
    Pool.objects.filter(resource_class__slug__in=items).update(capacity=F("capacity") + 10)
    request = CapacityRequestFactory(tenant=TenantFactory())
    for slug, amount in items.items():
        CapacityRequestItemFactory(
            request=request,
            resource_class_id=Pool.objects.get(resource_class__slug=slug).resource_class_id,
            amount=amount,
        )
    approval_services.approve_capacity_request(actor=admin, request=request, comment="re-layout")


def _beyond_the_rest(mine: list[str], wanted: dict[str, int]) -> dict[str, int]:
    """Demand that only my nodes can serve: what other A100s offer of each profile, plus more."""
    gpus, _ = proposals.fleet_from_inventory()
    elsewhere = planner.supply([g for g in gpus if g.node not in mine])
    return {slug: elsewhere.get(slug, 0) + n for slug, n in wanted.items()}


def test_plan_and_apply_serves_a_pending_2g_pod(kube, kube_admin, kube_namespace, plan_nodes):
    node = plan_nodes[0]
    admin = PlatformAdminFactory()
    inventory.sync_inventory(kube)
    scheduled_pod_for(kube_admin, kube_namespace, node, "wants-2g", "nvidia.com/mig-2g.20gb")
    # a pod without GPUs: the node has pods, so the rollout cordons it while it changes
    scheduled_pod_for(kube_admin, kube_namespace, node, "bystander")
    wait_for(
        "bystander running",
        lambda: (
            (kube.get("Pod", "bystander", kube_namespace) or {}).get("status", {}).get("phase")
            == "Running"
        ),
    )
    pod = kube.get("Pod", "wants-2g", kube_namespace)
    assert not pod["spec"].get("nodeName")  # nothing offers nvidia.com/mig-2g.20gb there

    # Demand: one 2g and one 3g, and two more 1g than the other A100s offer.
    _approve(admin, _beyond_the_rest([node], {TWO_G: 1, THREE_G: 1, ONE_G: 2}))
    plan = proposals.create_plan(actor=admin, nodes=[node])
    entry = plan.nodes[0]
    assert entry["node"] == node and entry["changed_gpus"] == [0]
    assert entry["mig_config"] == "all-balanced"
    assert TWO_G not in plan.summary["unserved"] and THREE_G not in plan.summary["unserved"]

    plan = rollout.apply_plan(kube, plan.pk, actor=admin)
    assert plan.status == Plan.Status.APPLIED, plan.error
    labels = kube.get("Node", node)["metadata"]["labels"]
    assert labels["nvidia.com/mig.config"] == "all-balanced"
    assert labels["nvidia.com/mig.config.state"] == "success"
    assert not kube.get("Node", node)["spec"].get("unschedulable")  # uncordoned again
    wait_for(
        "the 2g pod scheduled",
        lambda: (
            (kube.get("Pod", "wants-2g", kube_namespace) or {}).get("spec", {}).get("nodeName")
            == node
        ),
    )
    # The inventory followed, and every step was audited.
    assert Node.objects.get(name=node).mig_config == "all-balanced"
    verbs = list(
        AuditEvent.objects.filter(object_id=str(plan.pk), verb__startswith=("node.")).values_list(
            "verb", flat=True
        )
    )
    assert {"node.cordoned", "node.relabelled", "node.uncordoned", "node.config_applied"} <= set(
        verbs
    )
    cms = kube.list("ConfigMap", publishing.operator_namespace())
    assert publishing.config_map_name("mig-parted") in {c["metadata"]["name"] for c in cms}


def test_a_failed_relabel_stops_the_rollout_and_the_console_says_where(kube, plan_nodes, client):
    admin = PlatformAdminFactory()
    inventory.sync_inventory(kube)
    _approve(admin, _beyond_the_rest(plan_nodes, {TWO_G: 2, THREE_G: 2, ONE_G: 4}))
    plan = proposals.create_plan(actor=admin, nodes=plan_nodes)
    assert [e["changed_gpus"] for e in plan.nodes] == [[0], [0]]
    # Sabotage the first node's config: the MIG manager cannot pack it and reports failed.
    plan.nodes[0]["mig_config"] = "invalid-3g-3g-1g"
    plan.save()

    plan = rollout.apply_plan(kube, plan.pk, actor=admin)
    assert plan.status == Plan.Status.FAILED
    assert plan.failed_node == plan_nodes[0]
    assert "invalid-3g-3g-1g" in plan.error
    assert [e["state"] for e in plan.nodes] == ["failed", "pending"]
    # The second node was not touched.
    second = kube.get("Node", plan_nodes[1])["metadata"]["labels"]
    assert second["nvidia.com/mig.config"] == "all-1g.10gb"
    assert AuditEvent.objects.filter(verb="plan.failed", object_id=str(plan.pk)).exists()

    client.force_login(admin)
    page = client.get(f"/console/plans/{plan.pk}/").content.decode()
    assert f"Rollout stopped at node <strong>{plan_nodes[0]}</strong>" in page
    assert "cannot be placed" in page or "invalid-3g-3g-1g" in page


@pytest.fixture
def rollout_worker(kube):
    with celery_worker(["reconcile"]) as worker:
        yield worker


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_rollout_is_a_chain_of_one_task_per_node_and_a_broken_chain_is_resumed(
    kube, plan_nodes, rollout_worker
):
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.mig import orders
    from scheduler.mig import tasks as mig_tasks

    admin = PlatformAdminFactory()
    inventory.sync_inventory(kube)
    _approve(admin, _beyond_the_rest(plan_nodes, {TWO_G: 2, THREE_G: 2, ONE_G: 4}))
    plan = proposals.create_plan(actor=admin, nodes=plan_nodes)
    assert [e["changed_gpus"] for e in plan.nodes] == [[0], [0]]

    orders.request_plan_apply(actor=admin, plan=plan)
    wait_for(
        "the rollout applied",
        lambda: Plan.objects.get(pk=plan.pk).status == Plan.Status.APPLIED,
        timeout=60,
    )
    plan.refresh_from_db()
    assert [e["state"] for e in plan.nodes] == ["applied", "applied"]
    events = AuditEvent.objects.filter(object_id=str(plan.pk))
    assert events.filter(verb="plan.apply_started").count() == 1  # one rollout, two steps
    assert events.filter(verb="node.config_applied").count() == 2
    for name in plan_nodes:
        assert not kube.get("Node", name)["spec"].get("unschedulable")

    # A rollout whose chain broke after its first node (the worker was killed): silent for
    # longer than any step, so the periodic check resumes it from the second node.
    broken = Plan.objects.create(
        status=Plan.Status.APPLYING,
        nodes=[{**e, "state": s} for e, s in zip(plan.nodes, ("applied", "applying"), strict=True)],
        started_at=timezone.now() - timedelta(hours=1),
        heartbeat_at=timezone.now() - timedelta(minutes=10),
        rollout_id="dead",
        applied_by=admin,
    )
    assert mig_tasks.resume_stuck_rollouts() == 1
    wait_for(
        "the broken rollout resumed and finished",
        lambda: Plan.objects.get(pk=broken.pk).status == Plan.Status.APPLIED,
        timeout=60,
    )
    broken.refresh_from_db()
    assert broken.rollout_id != "dead"
    assert [e["state"] for e in broken.nodes] == ["applied", "applied"]
    resumed = AuditEvent.objects.filter(object_id=str(broken.pk))
    assert resumed.filter(verb="plan.apply_resumed").count() == 1
    assert list(
        resumed.filter(verb="node.config_applied").values_list("after__node", flat=True)
    ) == [plan_nodes[1]]  # the first node was not done again
    # a step of the dead chain that wakes up now does nothing
    assert rollout.step(kube, broken.pk, "dead", actor=admin) is False
    assert mig_tasks.resume_stuck_rollouts() == 0
