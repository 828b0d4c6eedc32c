"""The Kueue Configuration the chart documents is the one the portal and the local cluster use."""

from pathlib import Path

import yaml

from catalog import slices
from catalog.kueue_config import kueue_configuration
from localcluster import kueue as local_kueue

SHIPPED = Path(__file__).parents[2] / "deploy/helm/gpu-portal/files/kueue-configuration.yaml"


def test_the_charts_file_is_what_manage_py_kueue_config_prints():
    assert yaml.safe_load(SHIPPED.read_text()) == kueue_configuration(slices.UNIT_SLICES)


def test_the_local_kueue_runs_with_the_same_fragment_and_its_gates_by_flag():
    config = local_kueue.config()
    fragment = kueue_configuration(slices.UNIT_SLICES, feature_gates=False)
    assert {k: config[k] for k in fragment} == fragment
    assert "featureGates" not in config  # given by flag: both together fail Kueue's start
    assert "SchedulingEquivalenceHashing=true" in local_kueue.FEATURE_GATES


def test_per_class_quotas_run_kueue_without_transformations():
    assert "resources" not in kueue_configuration(slices.UNIT_CLASS)
