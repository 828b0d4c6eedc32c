"""Elastic layouts on the local cluster: a 3g ask waiting on a node laid out as 1g turns into a
3g instance with no click, on the idle GPU only; the 1g pod running on the other GPU is never
touched. On a fresh KWOK node of its own (never the seed nodes: the run is limited to it)."""

import uuid

import pytest

from localcluster.fleet import node_manifest
from scheduler.cluster import inventory
from scheduler.mig import publishing, reshaping
from scheduler.mig.models import ElasticLayout, Plan
from tenants.models import AuditEvent
from tests.scheduler.cluster_helpers import (
    node_ready,
    scheduled_pod_for,
    wait_for,
)
from tests.tenants.factories import PlatformAdminFactory

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

A100 = "A100-80GB"


@pytest.fixture
def node(kube_admin):
    """A fresh two-GPU A100 node, both GPUs 7 × 1g.10gb; deleted afterwards."""
    name = f"elastic-{uuid.uuid4().hex[:6]}"
    kube_admin.create(
        node_manifest(
            {
                "name": name,
                "model": A100,
                "gpus": 2,
                "migConfig": "all-1g.10gb",
                "devicePluginConfig": "default",
            }
        )
    )
    wait_for(f"{name} Ready", lambda: node_ready(kube_admin, name))
    yield name
    kube_admin.delete("Node", name)
    for kind in ("mig-parted", "device-plugin"):
        kube_admin.delete(
            "ConfigMap", publishing.config_map_name(kind), publishing.operator_namespace()
        )


def _phase(kube, namespace, name):
    return (kube.get("Pod", name, namespace) or {}).get("status", {}).get("phase")


def _unschedulable(kube, namespace, name):
    pod = kube.get("Pod", name, namespace) or {}
    return any(
        c.get("reason") == "Unschedulable" for c in pod.get("status", {}).get("conditions", [])
    )


def test_a_waiting_3g_ask_reshapes_the_idle_gpu_and_nothing_else(
    kube, kube_admin, kube_namespace, node
):
    admin = PlatformAdminFactory()
    reshaping.set_policy(
        actor=admin, gpu_model=A100, paused=False, min_wait_s=3600, max_gpus_per_hour=1
    )
    scheduled_pod_for(kube_admin, kube_namespace, node, "runs-1g", "nvidia.com/mig-1g.10gb")
    wait_for("the 1g pod running", lambda: _phase(kube, kube_namespace, "runs-1g") == "Running")
    uid = kube.get("Pod", "runs-1g", kube_namespace)["metadata"]["uid"]
    scheduled_pod_for(kube_admin, kube_namespace, node, "wants-3g", "nvidia.com/mig-3g.40gb")
    wait_for("the 3g pod unschedulable", lambda: _unschedulable(kube, kube_namespace, "wants-3g"))
    inventory.sync_inventory(kube)

    # Hysteresis: it has not waited an hour, so nothing changes.
    assert reshaping.run_once(kube, nodes={node}) == []
    assert not Plan.objects.filter(policy__controller=reshaping.CONTROLLER).exists()

    reshaping.set_policy(
        actor=admin, gpu_model=A100, paused=False, min_wait_s=0, max_gpus_per_hour=1
    )
    [plan] = reshaping.run_once(kube, nodes={node})
    assert plan.status == Plan.Status.APPLIED, plan.error
    [entry] = plan.changed_nodes
    assert entry["node"] == node and entry["changed_gpus"] == [1]  # GPU 0 holds the 1g pod
    wait_for(
        "the 3g pod scheduled",
        lambda: (
            (kube.get("Pod", "wants-3g", kube_namespace) or {}).get("spec", {}).get("nodeName")
            == node
        ),
    )
    # The running pod was never evicted, and the node is schedulable again.
    pod = kube.get("Pod", "runs-1g", kube_namespace)
    assert pod["metadata"]["uid"] == uid and pod["status"]["phase"] == "Running"
    assert not kube.get("Node", node)["spec"].get("unschedulable")
    event = AuditEvent.objects.get(verb="plan.elastic_change", object_id=str(plan.pk))
    assert "3g.40gb" in event.after["reason"] and f"{node} GPU 1" in event.after["reason"]
    assert not AuditEvent.objects.filter(verb="node.drained", object_id=str(plan.pk)).exists()

    # The budget (1 GPU an hour) is spent: a second waiting ask changes nothing this hour.
    scheduled_pod_for(kube_admin, kube_namespace, node, "wants-3g-more", "nvidia.com/mig-4g.40gb")
    wait_for(
        "the 4g pod unschedulable",
        lambda: _unschedulable(kube, kube_namespace, "wants-3g-more"),
    )
    inventory.sync_inventory(kube)
    assert reshaping.run_once(kube, nodes={node}) == []


def test_bad_policies_are_refused_and_change_nothing(db):
    from core.errors import InvalidInput

    admin = PlatformAdminFactory()
    for fields, field in (
        ({"min_wait_s": -1, "max_gpus_per_hour": 4}, "min_wait_s"),
        ({"min_wait_s": 60, "max_gpus_per_hour": 0}, "max_gpus_per_hour"),
        ({"min_wait_s": 1.5, "max_gpus_per_hour": 4}, "min_wait_s"),
    ):
        with pytest.raises(InvalidInput) as err:
            reshaping.set_policy(actor=admin, gpu_model=A100, paused=False, **fields)
        assert err.value.field == field
    with pytest.raises(InvalidInput):
        reshaping.set_policy(
            actor=admin, gpu_model="no-such-gpu", paused=False, min_wait_s=0, max_gpus_per_hour=1
        )
    assert not ElasticLayout.objects.exists()
    assert not AuditEvent.objects.filter(verb="elastic_layout.set").exists()
