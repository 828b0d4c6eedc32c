"""Rollout pieces without a cluster: the published ConfigMaps and a node that never answers."""

import pytest
import yaml

from scheduler import rollout
from scheduler.models import Plan


def test_config_manifests_carry_every_config(settings):
    settings.PORTAL_INSTANCE = "x"
    mig = {"portal-a100-80gb-abc": [{"devices": [0], "mig-enabled": True, "mig-devices": {}}]}
    ns, mig_cm, dp_cm = rollout.config_manifests(mig, {"default": {"version": "v1"}})
    assert ns["kind"] == "Namespace" and ns["metadata"]["name"] == "gpu-operator"
    assert mig_cm["metadata"]["name"] == "gpu-portal-x-mig-parted-config"
    assert mig_cm["metadata"]["labels"]["gpu-portal/config"] == "mig-parted"
    assert yaml.safe_load(mig_cm["data"]["config.yaml"]) == {"version": "v1", "mig-configs": mig}
    assert yaml.safe_load(dp_cm["data"]["default"]) == {"version": "v1"}


class SilentNode:
    """A gateway whose node takes the new label but whose MIG manager never answers."""

    def __init__(self):
        self.labels = {"nvidia.com/mig.config": "all-1g.10gb"}
        self.patches = []

    def get(self, kind, name, namespace=None):
        return {"metadata": {"name": name, "labels": dict(self.labels)}, "spec": {}}

    def list(self, kind, namespace=None, **kwargs):
        if kind == "Pod":
            return [{"status": {"phase": "Running"}}]
        return []

    def merge_patch(self, kind, name, patch, namespace=None):
        self.patches.append(patch)
        self.labels.update((patch.get("metadata") or {}).get("labels") or {})


@pytest.mark.django_db
def test_a_node_that_never_answers_times_out_and_stays_cordoned():
    kube = SilentNode()
    plan = Plan.objects.create()
    entry = {"node": "n", "mig_config": "all-balanced", "device_plugin_config": ""}
    ok, message = rollout.apply_node(kube, plan, entry, timeout_s=0.05, sleep=lambda s: None)
    assert not ok and "timed out" in message and "cordoned" in message
    assert kube.patches[0] == {"spec": {"unschedulable": True}}
    assert kube.labels["nvidia.com/mig.config.state"] == "pending"
    assert {"spec": {"unschedulable": False}} not in kube.patches


@pytest.mark.django_db
def test_a_node_already_labelled_is_left_alone():
    kube = SilentNode()
    plan = Plan.objects.create()
    entry = {"node": "n", "mig_config": "all-1g.10gb", "device_plugin_config": ""}
    assert rollout.apply_node(kube, plan, entry) == (True, "already labelled")
    assert kube.patches == []


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

    running = Plan.objects.create(status=Plan.Status.APPLYING, started_at=timezone.now())
    assert tasks.apply_plan.apply(kwargs={"plan_id": running.pk}).get() == "applying"
    stuck = Plan.objects.create(
        status=Plan.Status.APPLYING, started_at=timezone.now() - timedelta(hours=1)
    )
    assert tasks.apply_plan.apply(kwargs={"plan_id": stuck.pk}).get() == "applied"
    assert AuditEvent.objects.filter(verb="plan.apply_resumed").count() == 1
    running.refresh_from_db()
    assert running.status == Plan.Status.APPLYING
