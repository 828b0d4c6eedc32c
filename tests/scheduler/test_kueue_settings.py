"""Kueue's enforcement settings from one source (issue 48): the fragment every Kueue runs with
(queue enforcement among it), and the integrations setting and its start-up check."""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import call_command

from catalog import kueue_integrations, slices
from catalog.kueue_config import QUEUE_ENFORCED_LABEL, TENANT_SELECTOR, kueue_configuration
from scheduler.cluster.render import labels
from scheduler.cluster.settings_checks import check_kueue_integrations

JOBSET = "jobset.x-k8s.io/jobset"
RAYJOB = "ray.io/rayjob"
PYTORCH = "kubeflow.org/pytorchjob"


# --- the fragment: one source of the enforcement keys --------------------------------------------


def test_the_fragment_holds_every_enforcement_key():
    fragment = kueue_configuration(slices.UNIT_SLICES)
    assert fragment["manageJobsWithoutQueueName"] is True
    assert fragment["managedJobsNamespaceSelector"] == {
        "matchLabels": {"gpu-portal.io/queue-enforced": "true"}
    }
    assert fragment["integrations"] == {
        "frameworks": ["batch/job", "pod", "deployment", "statefulset"]
    }
    assert "waitForPodsReady" in fragment
    # the selector names the label the portal sets on team namespaces, from one constant
    assert labels.QUEUE_ENFORCED_LABEL == QUEUE_ENFORCED_LABEL == "gpu-portal.io/queue-enforced"
    fragment["managedJobsNamespaceSelector"]["matchLabels"]["x"] = "y"  # a copy, not the constant
    assert TENANT_SELECTOR == {"matchLabels": {QUEUE_ENFORCED_LABEL: "true"}}


def test_the_fragment_lists_the_integrations_it_is_given():
    fragment = kueue_configuration(slices.UNIT_SLICES, integrations=["batch/job", "pod", JOBSET])
    assert fragment["integrations"]["frameworks"] == ["batch/job", "pod", JOBSET]


def test_manage_py_kueue_config_prints_the_integrations_setting(settings):
    settings.KUEUE_INTEGRATIONS = [*kueue_integrations.DEFAULT, RAYJOB]
    out = io.StringIO()
    call_command("kueue_config", stdout=out)
    printed = yaml.safe_load(out.getvalue())
    assert printed["integrations"]["frameworks"][-1] == RAYJOB
    assert printed["manageJobsWithoutQueueName"] is True
    assert printed["managedJobsNamespaceSelector"] == TENANT_SELECTOR


# --- the setting and its start-up check ----------------------------------------------------------


def test_integrations_parse_as_the_setting_and_the_local_cluster_read_them():
    assert kueue_integrations.parse(" batch/job, pod,,pod ,deployment") == (
        "batch/job",
        "pod",
        "deployment",
    )
    assert kueue_integrations.from_env({}) == kueue_integrations.DEFAULT
    assert kueue_integrations.from_env({"KUEUE_INTEGRATIONS": ""}) == kueue_integrations.DEFAULT
    assert kueue_integrations.from_env({"KUEUE_INTEGRATIONS": "batch/job,pod"}) == (
        "batch/job",
        "pod",
    )


def test_the_settings_default_is_the_catalogs(settings):
    from portal.settings import base

    assert tuple(base.KUEUE_INTEGRATIONS) == kueue_integrations.DEFAULT
    assert check_kueue_integrations() == []


def test_an_unknown_integration_is_refused_at_start_up_with_a_hint(settings):
    settings.KUEUE_INTEGRATIONS = [*kueue_integrations.DEFAULT, "kubeflow.org/pytorchjobs"]
    (error,) = check_kueue_integrations()
    assert error.id == "scheduler.E006"
    assert "'kubeflow.org/pytorchjobs' is not a Kueue integration" in error.msg
    assert PYTORCH in error.hint and "ray.io/rayjob" in error.hint


def test_leaving_out_what_the_portal_submits_is_refused(settings):
    settings.KUEUE_INTEGRATIONS = ["batch/job", "statefulset"]
    errors = check_kueue_integrations()
    assert [e.id for e in errors] == ["scheduler.E006", "scheduler.E006"]
    assert "'pod' is missing" in errors[0].msg and "'deployment' is missing" in errors[1].msg


@pytest.mark.parametrize(
    ("name", "group", "resource"),
    [
        (JOBSET, "jobset.x-k8s.io", "jobsets"),
        ("kubeflow.org/mpijob", "kubeflow.org", "mpijobs"),
        (PYTORCH, "kubeflow.org", "pytorchjobs"),
        ("kubeflow.org/tfjob", "kubeflow.org", "tfjobs"),
        ("kubeflow.org/paddlejob", "kubeflow.org", "paddlejobs"),
        ("kubeflow.org/xgboostjob", "kubeflow.org", "xgboostjobs"),
        ("kubeflow.org/jaxjob", "kubeflow.org", "jaxjobs"),
        ("trainer.kubeflow.org/trainjob", "trainer.kubeflow.org", "trainjobs"),
        (RAYJOB, "ray.io", "rayjobs"),
        ("ray.io/raycluster", "ray.io", "rayclusters"),
        (
            "leaderworkerset.x-k8s.io/leaderworkerset",
            "leaderworkerset.x-k8s.io",
            "leaderworkersets",
        ),
    ],
)
def test_each_optional_integration_maps_to_its_kind_and_crd(name, group, resource):
    framework = kueue_integrations.FRAMEWORKS[name]
    assert (framework.group, framework.resource, framework.builtin) == (group, resource, False)
    assert framework.crd == f"{resource}.{group}"
