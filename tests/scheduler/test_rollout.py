"""Rollout pieces: the published ConfigMaps (pure), a node whose MIG manager never answers and a
node already labelled (on the real cluster), and resuming a stuck plan."""

import uuid

import pytest
import yaml

from localcluster.fleet import node_manifest
from localcluster.pytest_plugin import wait_for
from scheduler.mig import rollout
from scheduler.mig.models import Plan


def test_config_manifests_carry_every_config(settings):
    settings.PORTAL_INSTANCE = "x"
    mig = {"portal-a100-80gb-abc": [{"devices": [0], "mig-enabled": True, "mig-devices": {}}]}
    ns, mig_cm, dp_cm = rollout.config_manifests(mig, {"default": {"version": "v1"}})
    assert ns["kind"] == "Namespace" and ns["metadata"]["name"] == "gpu-operator"
    assert mig_cm["metadata"]["name"] == "gpu-portal-x-mig-parted-config"
    assert mig_cm["metadata"]["labels"]["gpu-portal/config"] == "mig-parted"
    assert yaml.safe_load(mig_cm["data"]["config.yaml"]) == {"version": "v1", "mig-configs": mig}
    assert yaml.safe_load(dp_cm["data"]["default"]) == {"version": "v1"}


@pytest.fixture
def unanswered_node(kube, kube_namespace):
    """A real (KWOK) A100 node with a running pod, but without the model label the simulated MIG
    manager watches: relabel it and nothing ever answers, as with a dead MIG manager."""
    name = f"silent-{uuid.uuid4().hex[:6]}"
    manifest = node_manifest(
        {
            "name": name,
            "model": "A100-80GB",
            "gpus": 1,
            "migConfig": "all-1g.10gb",
            "devicePluginConfig": "default",
        }
    )
    del manifest["metadata"]["labels"]["gpu-portal/gpu-model"]
    kube.create(manifest)
    wait_for(
        "node Ready",
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (kube.get("Node", name) or {}).get("status", {}).get("conditions", [])
        ),
    )
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "busy", "namespace": kube_namespace},
            "spec": {
                "nodeName": name,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
    )
    wait_for(
        "pod running",
        lambda: kube.get("Pod", "busy", kube_namespace)["status"].get("phase") == "Running",
    )
    yield name
    kube.delete("Node", name)


@pytest.mark.cluster
@pytest.mark.django_db
def test_a_node_that_never_answers_times_out_and_stays_cordoned(kube, unanswered_node):
    plan = Plan.objects.create()
    entry = {"node": unanswered_node, "mig_config": "all-balanced", "device_plugin_config": ""}
    ok, message = rollout.apply_node(kube, plan, entry, timeout_s=1.0)
    assert not ok and "timed out" in message and "cordoned" in message
    node = kube.get("Node", unanswered_node)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "pending"
    assert node["metadata"]["labels"]["nvidia.com/mig.config"] == "all-balanced"


@pytest.mark.cluster
@pytest.mark.django_db
def test_a_node_already_labelled_is_left_alone(kube, unanswered_node):
    plan = Plan.objects.create()
    before = kube.get("Node", unanswered_node)["metadata"]["resourceVersion"]
    entry = {"node": unanswered_node, "mig_config": "all-1g.10gb", "device_plugin_config": ""}
    assert rollout.apply_node(kube, plan, entry) == (True, "already labelled")
    assert kube.get("Node", unanswered_node)["metadata"]["resourceVersion"] == before


@pytest.mark.django_db
def test_only_an_applying_plan_older_than_any_worker_is_stuck():
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    fresh = Plan(status=Plan.Status.APPLYING, started_at=now - timedelta(seconds=30))
    old = Plan(status=Plan.Status.APPLYING, started_at=now - timedelta(hours=1))
    done = Plan(status=Plan.Status.APPLIED, started_at=now - timedelta(hours=1))
    assert not fresh.is_stuck(now) and old.is_stuck(now) and not done.is_stuck(now)


@pytest.mark.cluster
@pytest.mark.django_db
def test_a_stuck_rollout_is_resumed_by_the_task_and_a_running_one_left_alone(kube):
    from datetime import timedelta

    from django.utils import timezone

    from scheduler import tasks
    from tenants.models import AuditEvent
    from tests.tenants.factories import PlatformAdminFactory

    admin = PlatformAdminFactory()
    running = Plan.objects.create(status=Plan.Status.APPLYING, started_at=timezone.now())
    run = {"plan_id": running.pk, "actor_id": admin.pk}
    assert tasks.apply_plan.apply(kwargs=run).get() == "applying"
    stuck = Plan.objects.create(
        status=Plan.Status.APPLYING, started_at=timezone.now() - timedelta(hours=1)
    )
    assert tasks.apply_plan.apply(kwargs={"plan_id": stuck.pk, "actor_id": admin.pk}).get() == (
        "applied"
    )
    assert AuditEvent.objects.filter(verb="plan.apply_resumed").count() == 1
    running.refresh_from_db()
    assert running.status == Plan.Status.APPLYING
