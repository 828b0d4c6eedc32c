"""The Kueue Configuration the chart documents is the one the portal and the local cluster use."""

from pathlib import Path

import pytest
import yaml

from catalog import dra_devices, kueue_integrations, slices
from catalog.kueue_config import kueue_configuration
from localcluster import kueue as local_kueue

SHIPPED = Path(__file__).parents[2] / "deploy/helm/gpu-portal/files/kueue-configuration.yaml"


def test_the_charts_file_is_what_manage_py_kueue_config_prints():
    assert yaml.safe_load(SHIPPED.read_text()) == kueue_configuration(slices.UNIT_SLICES)


def test_the_local_kueue_runs_with_the_same_fragment_and_its_gates_by_flag():
    config = local_kueue.config()
    fragment = kueue_configuration(
        slices.UNIT_SLICES,
        feature_gates=False,
        integrations=kueue_integrations.LOCAL_CLUSTER,  # JobSet's controller runs there too
        dra_models=dra_devices.LOCAL_CLUSTER_MODELS,  # its DRA node's model (dra_node.py)
    )
    assert {k: config[k] for k in fragment} == fragment
    assert "featureGates" not in config  # given by flag: both together fail Kueue's start
    assert "SchedulingEquivalenceHashing=true" in local_kueue.FEATURE_GATES


def test_per_class_quotas_run_kueue_without_transformations():
    assert "resources" not in kueue_configuration(slices.UNIT_CLASS)


def test_the_local_kueue_enforces_the_queue_from_the_fragment_not_a_copy(monkeypatch):
    monkeypatch.delenv(kueue_integrations.ENV, raising=False)
    config = local_kueue.config()
    assert config["manageJobsWithoutQueueName"] is True
    assert config["managedJobsNamespaceSelector"] == local_kueue.TENANT_SELECTOR
    assert config["integrations"]["frameworks"] == list(kueue_integrations.LOCAL_CLUSTER)
    # every integration it enables has its webhooks scoped to team namespaces
    for name in kueue_integrations.LOCAL_CLUSTER:
        framework = kueue_integrations.FRAMEWORKS[name]
        assert (framework.group, framework.resource) in local_kueue.WORKLOAD_RESOURCES


def test_the_local_kueue_reads_kueue_integrations_and_refuses_what_it_cannot_run(monkeypatch):
    monkeypatch.setenv(kueue_integrations.ENV, "batch/job,pod,deployment")
    assert local_kueue.config()["integrations"]["frameworks"] == ["batch/job", "pod", "deployment"]
    monkeypatch.setenv(kueue_integrations.ENV, "batch/job,pod,deployment,ray.io/rayjob")
    with pytest.raises(local_kueue.ClusterError, match="ray.io/rayjob"):
        local_kueue.config()


def test_the_local_kueue_publishes_its_configuration_where_the_portal_reads_it(settings):
    text = yaml.safe_dump(local_kueue.config(), sort_keys=False)
    cm = local_kueue.config_map(text)
    assert (cm["metadata"]["namespace"], cm["metadata"]["name"]) == (
        settings.KUEUE_CONFIG_NAMESPACE,
        settings.KUEUE_CONFIG_MAP,
    )
    assert cm["data"] == {"controller_manager_config.yaml": text}
