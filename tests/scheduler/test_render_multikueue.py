"""MultiKueue's objects on the manager, compared as dicts (pure), and the Kueue Configuration
fragment of a fleet's manager."""

import base64
import io

import pytest
import yaml
from django.core.management import CommandError, call_command

from catalog import slices
from catalog.kueue_config import kueue_configuration, multikueue_section
from scheduler.cluster.credentials import BadKubeconfig
from scheduler.cluster.render import multikueue as mk
from scheduler.cluster.render.labels import HASH_ANNOTATION, _finish, content_hash
from tests.scheduler.fleet_standins import kubeconfig, text

EAST = mk.WorkerSpec("east", secret="east-kubeconfig", preference=10, group="gpu")
WEST = mk.WorkerSpec("west", secret="west-kubeconfig", preference=20, group="gpu")
NORTH = mk.WorkerSpec("north", secret="north-kubeconfig", preference=10, group="gpu")
LABELS = {"app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/instance": "prod"}


def body(manifest: dict) -> dict:
    """The manifest without its content hash (checked on its own)."""
    annotations = manifest["metadata"].pop("annotations")
    assert annotations == {HASH_ANNOTATION: content_hash(manifest)}
    return manifest


def test_the_admission_check_names_its_multikueue_config():
    assert body(mk.render_admission_check("gpu-portal-prod-group-gpu", "prod")) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": "gpu-portal-prod-group-gpu", "labels": LABELS},
        "spec": {
            "controllerName": "kueue.x-k8s.io/multikueue",
            "parameters": {
                "apiGroup": "kueue.x-k8s.io",
                "kind": "MultiKueueConfig",
                "name": "gpu-portal-prod-group-gpu",
            },
        },
    }


def test_the_config_lists_workers_in_the_platforms_order_preference_then_name():
    config = body(mk.render_multikueue_config("g", [WEST, EAST, NORTH], "prod"))
    assert config == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "MultiKueueConfig",
        "metadata": {"name": "g", "labels": LABELS},
        "spec": {
            "clusters": ["gpu-portal-prod-east", "gpu-portal-prod-north", "gpu-portal-prod-west"]
        },
    }


@pytest.mark.parametrize(
    ("workers", "said"),
    [
        ([], "no worker to dispatch to"),
        ([EAST, EAST], "a worker is listed twice"),
        ([mk.WorkerSpec(f"w{i}", secret="s") for i in range(21)], "at most 20"),
    ],
)
def test_a_config_kueue_would_refuse_is_never_rendered(workers, said):
    with pytest.raises(ValueError, match=said):
        mk.render_multikueue_config("g", workers, "prod")


def test_a_worker_is_a_multikueue_cluster_reading_its_secret():
    assert body(mk.render_multikueue_cluster(EAST, "prod")) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "MultiKueueCluster",
        "metadata": {
            "name": "gpu-portal-prod-east",
            "labels": {**LABELS, "gpu-portal.io/cluster": "east"},
        },
        "spec": {
            "clusterSource": {
                "kubeConfig": {"locationType": "Secret", "location": "east-kubeconfig"}
            }
        },
    }


def test_the_kubeconfig_secret_copy_sits_in_kueues_namespace_under_the_key_kubeconfig():
    secret = body(
        mk.render_kubeconfig_secret("east", text(), namespace="kueue-system", instance="prod")
    )
    assert secret["metadata"] == {
        "name": "gpu-portal-prod-east-kubeconfig",
        "namespace": "kueue-system",
        "labels": {**LABELS, "gpu-portal.io/cluster": "east"},
    }
    assert secret["type"] == "Opaque"
    assert yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"])) == kubeconfig()


def test_a_kubeconfig_multikueue_would_refuse_is_never_copied():
    refused = text(kubeconfig(users={"exec": {"command": "gke-gcloud-auth-plugin"}}))
    with pytest.raises(BadKubeconfig, match="exec plugins are refused"):
        mk.render_kubeconfig_secret("east", refused, namespace="kueue-system", instance="prod")


def test_names_are_dns_labels_even_for_long_names():
    name = mk.cluster_object_name("a-very-long-instance-name-for-a-test", "x" * 40)
    assert len(name) <= 63 and name.startswith("gpu-portal-a-very-long")
    assert mk.group_target_name("prod", "gpu") == "gpu-portal-prod-group-gpu"
    assert mk.worker_target_name("prod", "east") == "gpu-portal-prod-on-east"
    assert mk.secret_copy_name("prod", "east") == "gpu-portal-prod-east-kubeconfig"
    # a group and a worker of one name never share a check
    assert mk.group_target_name("prod", "east") != mk.worker_target_name("prod", "east")


def _queue() -> dict:
    """A team's ClusterQueue as render/kueue.py makes it (the fields that matter here)."""
    return _finish(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "tenant-team-a", "labels": LABELS},
            "spec": {"cohortName": "gpu-portal-prod", "resourceGroups": []},
        }
    )


def test_a_cluster_queue_with_checks_dispatches_and_without_them_runs_at_home():
    queue = _queue()
    dispatching = mk.with_admission_checks(queue, ["gpu-portal-prod-group-gpu", "a", "a"])
    assert dispatching["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "a"}, {"name": "gpu-portal-prod-group-gpu"}]
    }
    assert "admissionChecksStrategy" not in queue["spec"]  # the original is left alone
    annotations = dispatching["metadata"]["annotations"]
    assert annotations[HASH_ANNOTATION] == content_hash(dispatching)
    back = mk.with_admission_checks(dispatching, [])
    assert "admissionChecksStrategy" not in back["spec"]
    assert back["metadata"]["annotations"][HASH_ANNOTATION] == content_hash(_queue())


def test_the_manager_gets_each_worker_once_then_each_targets_check_and_config():
    targets = [
        mk.DispatchTarget("gpu-portal-prod-on-west", (WEST,)),
        mk.DispatchTarget("gpu-portal-prod-group-gpu", (WEST, EAST)),
    ]
    objects = mk.render_manager(targets, "prod")
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("MultiKueueCluster", "gpu-portal-prod-east"),
        ("MultiKueueCluster", "gpu-portal-prod-west"),
        ("AdmissionCheck", "gpu-portal-prod-group-gpu"),
        ("MultiKueueConfig", "gpu-portal-prod-group-gpu"),
        ("AdmissionCheck", "gpu-portal-prod-on-west"),
        ("MultiKueueConfig", "gpu-portal-prod-on-west"),
    ]
    assert objects[3]["spec"]["clusters"] == ["gpu-portal-prod-east", "gpu-portal-prod-west"]


def test_the_managers_kueue_dispatches_incrementally_in_the_platforms_order():
    fragment = kueue_configuration(slices.UNIT_SLICES, multikueue=1)
    assert fragment["multiKueue"] == {
        "dispatcherName": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
        "incrementalDispatcherConfig": {"stepSize": 1},
    }
    assert fragment["featureGates"]["MultiKueueIncrementalDispatcherRespectConfigOrder"] is True
    assert fragment["featureGates"]["MultiKueueIncrementalDispatcherConfig"] is True
    assert "MultiKueue" not in kueue_configuration(
        slices.UNIT_SLICES, feature_gates=False, multikueue=3
    ).get("featureGates", {})
    # any other cluster's Kueue is configured as before
    plain = kueue_configuration(slices.UNIT_SLICES)
    assert "multiKueue" not in plain and "MultiKueue" not in plain["featureGates"]


@pytest.mark.parametrize("step", [0, -1, True, "3"])
def test_a_dispatch_step_below_one_is_refused(step):
    with pytest.raises(ValueError, match="at least 1"):
        multikueue_section(step)


def test_a_worker_lost_timeout_is_said_in_seconds_or_left_to_kueue():
    assert "workerLostTimeout" not in multikueue_section()  # Kueue's 15 minutes
    assert multikueue_section(worker_lost_s=30)["workerLostTimeout"] == "30s"
    for bad in (0, -5, True, "30"):
        with pytest.raises(ValueError, match="whole seconds, at least 1"):
            multikueue_section(worker_lost_s=bad)
    out = io.StringIO()
    call_command("kueue_config", "--manager", "--worker-lost-timeout", "120", stdout=out)
    assert yaml.safe_load(out.getvalue())["multiKueue"]["workerLostTimeout"] == "120s"


def test_manage_py_kueue_config_prints_the_managers_fragment_only_when_asked():
    out = io.StringIO()
    call_command("kueue_config", "--manager", "--dispatch-step", "1", stdout=out)
    printed = yaml.safe_load(out.getvalue())
    assert printed["multiKueue"]["incrementalDispatcherConfig"] == {"stepSize": 1}
    out = io.StringIO()
    call_command("kueue_config", stdout=out)
    assert "multiKueue" not in yaml.safe_load(out.getvalue())
    with pytest.raises(CommandError, match="at least 1"):
        call_command("kueue_config", "--manager", "--dispatch-step", "0", stdout=io.StringIO())
