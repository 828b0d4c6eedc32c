"""Tests against the real local control plane (kube-apiserver, scheduler, controllers, KWOK) and
the GPU simulator. Plain pytest; fixtures from localcluster.pytest_plugin."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from catalog import facts
from localcluster import build, cluster, components, fleet, simulator
from localcluster import gpu_layout as gl
from localcluster.pytest_plugin import wait_for

pytestmark = pytest.mark.cluster

SEED_GPU_ALLOCATABLE = {
    "gpu-a100-0": {
        "nvidia.com/gpu": "2",
        "nvidia.com/mig-3g.40gb": "2",
        "nvidia.com/mig-1g.10gb": "7",
    },
    "gpu-h100-0": {"nvidia.com/mig-3g.40gb": "16"},
    "gpu-h200-0": {"nvidia.com/gpu": "8"},
    "gpu-l40s-0": {"nvidia.com/gpu.shared": "16"},
    "gpu-rtx4090-0": {"nvidia.com/gpu": "4"},
}
PRIORITY_CLASSES = {"gpu-critical": 1_000_000, "gpu-high": 900_000, "gpu-low": 100_000}


# --- helpers ---------------------------------------------------------------------------------


def gpu_pod(
    name: str, resources: dict[str, int], node: str | None = None, priority_class: str | None = None
) -> dict:
    limits = {k: str(v) for k, v in resources.items()}
    spec: dict = {
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": limits, "requests": dict(limits)},
            }
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "tolerations": fleet.gpu_tolerations(),  # every GPU node is tainted
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def pod_phase(core: client.CoreV1Api, ns: str, name: str) -> str | None:
    try:
        return core.read_namespaced_pod(name, ns).status.phase
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def scheduling_failures(core: client.CoreV1Api, ns: str, pod: str) -> list[str]:
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={pod}").items
    return [e.message for e in events if e.reason == "FailedScheduling"]


def wait_quota_ready(core: client.CoreV1Api, ns: str, name: str) -> None:
    # Until the resourcequota controller fills status, admission refuses pods ("status unknown").
    wait_for(
        f"quota {name} status",
        lambda: core.read_namespaced_resource_quota(name, ns).status.hard or None,
    )


def node_state(core: client.CoreV1Api, name: str) -> tuple[dict, dict]:
    node = core.read_node(name)
    return node.metadata.labels, node.status.allocatable


def relabel(
    core: client.CoreV1Api,
    node: str,
    key: str,
    value: str,
    state_key: str,
    expect: str,
    seen: set[str] | None = None,
) -> None:
    core.patch_node(node, {"metadata": {"labels": {key: value}}})

    def done():
        labels = core.read_node(node).metadata.labels
        ann = core.read_node(node).metadata.annotations
        if seen is not None:
            seen.add(labels.get(state_key))
        observed = ann.get(f"gpu-portal.local/{key.split('/', 1)[1]}.observed")
        return observed == value and labels.get(state_key) == expect

    wait_for(f"{node} {state_key}={expect}", done, timeout=20, interval=0.05)


@pytest.fixture(scope="module")
def priority_classes(kube_cluster):
    sched = client.SchedulingV1Api(kube_cluster.api_client)
    for name, value in PRIORITY_CLASSES.items():
        try:
            sched.create_priority_class(
                {
                    "metadata": {"name": name},
                    "value": value,
                    "preemptionPolicy": "PreemptLowerPriority",
                }
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
    return PRIORITY_CLASSES


# --- control plane and fleet -----------------------------------------------------------------


def test_server_reports_pinned_version(kube_cluster):
    info = client.VersionApi(kube_cluster.api_client).get_code()
    assert info.git_version == build.KUBERNETES_VERSION


def test_seed_nodes_ready_with_gpu_allocatable(kube_cluster):
    nodes = {n.metadata.name: n for n in kube_cluster.core.list_node().items}
    for name, gpus in SEED_GPU_ALLOCATABLE.items():
        node = nodes[name]
        ready = [c.status for c in node.status.conditions if c.type == "Ready"]
        assert ready == ["True"], name
        alloc = {
            k: v
            for k, v in node.status.allocatable.items()
            if k.startswith("nvidia.com/") and v != "0"
        }
        assert alloc == gpus, name
    a100 = nodes["gpu-a100-0"].metadata.labels
    assert a100["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert "gpu-portal/gpu-model" not in a100  # the product label is what tells the model
    assert a100["nvidia.com/mig.config"] == "mixed"
    assert a100["nvidia.com/mig.config.state"] == "success"
    assert a100["nvidia.com/mig-1g.10gb.count"] == "7"
    l40s = nodes["gpu-l40s-0"].metadata.labels
    assert l40s["nvidia.com/gpu.replicas"] == "4"
    assert l40s["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert l40s["nvidia.com/mig.capable"] == "false"


def test_mig_pod_lands_on_a100_and_runs(kube_cluster, kube_namespace):
    core = kube_cluster.core
    core.create_namespaced_pod(kube_namespace, gpu_pod("mig-1g", {"nvidia.com/mig-1g.10gb": 1}))
    wait_for("pod Running", lambda: pod_phase(core, kube_namespace, "mig-1g") == "Running")
    node = core.read_node(core.read_namespaced_pod("mig-1g", kube_namespace).spec.node_name)
    assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    if not core.list_node(label_selector="gpu-portal.local/bench=true").items:
        assert node.metadata.name == "gpu-a100-0"  # the seed fleet's only MIG-1g node


def test_every_gpu_node_is_tainted_and_keeps_untolerating_pods_off(kube_cluster, kube_namespace):
    core = kube_cluster.core
    for name in SEED_GPU_ALLOCATABLE:
        taints = [(t.key, t.value, t.effect) for t in core.read_node(name).spec.taints or []]
        assert ("nvidia.com/gpu", "present", "NoSchedule") in taints, name
    untolerating = gpu_pod("no-toleration", {"nvidia.com/mig-1g.10gb": 1})
    del untolerating["spec"]["tolerations"]
    core.create_namespaced_pod(kube_namespace, untolerating)
    messages = wait_for(
        "FailedScheduling event", lambda: scheduling_failures(core, kube_namespace, "no-toleration")
    )
    # Kubernetes 1.36 no longer names the taint in the message (1.33 said `{nvidia.com/gpu:
    # present}`): every node refused it for a taint, and every GPU node has that one (above)
    nodes = len(core.list_node().items)
    assert any(f"{nodes} node(s) had untolerated taint" in m for m in messages), messages


def test_up_brings_an_old_node_up_to_date_and_then_changes_nothing(kube_cluster):
    """The API server applies `node_update`'s merge patch as `ensure_nodes` means it: the stale
    label deleted, the taint list replaced with the others kept. On a node of the test's own
    (no KWOK annotation, so never Ready, and a taint of its own): untainting a shared fleet
    node would let other sessions' pods land on it meanwhile."""
    core = kube_cluster.core
    name = f"t-old-fleet-node-{uuid.uuid4().hex[:6]}"
    keep = {"key": "gpu-portal.local/test-only", "value": "true", "effect": "NoSchedule"}
    # as a node made by an older fleet: no GPU taint, the old model label
    core.create_node(
        {
            "metadata": {
                "name": name,
                "labels": {"gpu-portal/gpu-model": "RTX4090-24GB", "gpu-portal.local/test": "true"},
            },
            "spec": {"taints": [keep]},
        }
    )
    try:

        def update() -> dict | None:
            node = core.read_node(name)
            patch = fleet.node_update(kube_cluster.api_client.sanitize_for_serialization(node))
            if patch:
                core.patch_node(name, patch)
            return patch

        assert update() is not None
        node = core.read_node(name)
        # the stale model label gone, the fleet's GPU labels added, the node's own kept
        assert node.metadata.labels == {"gpu-portal.local/test": "true", **fleet.fleet_gpu_labels()}
        taints = [(t.key, t.value, t.effect) for t in node.spec.taints or []]
        assert taints.count(("nvidia.com/gpu", "present", "NoSchedule")) == 1
        assert (keep["key"], keep["value"], keep["effect"]) in taints
        assert update() is None  # nothing left to write
    finally:
        core.delete_node(name)


def test_the_simulator_restarts_when_any_file_it_reads_changes():
    sources = set(components.simulator_sources())
    read = {gl.MIG_CONFIG_FILE, gl.DEVICE_PLUGIN_CONFIG_FILE, gl.FLEET_FILE, facts.CATALOG_PATH}
    assert read <= sources
    assert {Path(simulator.__file__), Path(gl.__file__), Path(facts.__file__)} <= sources


def test_the_controller_manager_runs_the_autoscaler_and_restarts_when_its_flags_change():
    specs = {c.name: c for c in components.component_specs(build.binaries())}
    manager = specs["kube-controller-manager"]
    flags = " ".join(manager.argv)
    assert "horizontal-pod-autoscaler-controller" in flags
    assert "--horizontal-pod-autoscaler-sync-period=5s" in flags
    version = cluster._code_version(manager)
    assert version and version == cluster._code_version(manager)
    changed = components.Component(manager.name, [*manager.argv, "--v=2"])
    assert cluster._code_version(changed) != version


def test_pod_larger_than_any_node_stays_pending(kube_cluster, kube_namespace):
    core = kube_cluster.core
    core.create_namespaced_pod(kube_namespace, gpu_pod("huge", {"nvidia.com/gpu": 100}))
    messages = wait_for(
        "FailedScheduling event", lambda: scheduling_failures(core, kube_namespace, "huge")
    )
    assert any("Insufficient nvidia.com/gpu" in m for m in messages), messages
    assert pod_phase(core, kube_namespace, "huge") == "Pending"


def test_job_pods_keep_running_until_the_test_finishes_them(kube_cluster, kube_namespace):
    """KWOK runs without its pod-complete stage: Job pods stay Running; tests drive completion."""
    core, batch = kube_cluster.core, client.BatchV1Api(kube_cluster.api_client)
    pod_spec = gpu_pod("unused", {"nvidia.com/gpu": 1}, "gpu-h200-0")["spec"]
    batch.create_namespaced_job(
        kube_namespace,
        {
            "metadata": {"name": "train"},
            "spec": {"backoffLimit": 0, "template": {"spec": pod_spec}},
        },
    )

    def running_pod():
        pods = core.list_namespaced_pod(kube_namespace, label_selector="job-name=train").items
        return next((p for p in pods if p.status.phase == "Running"), None)

    pod = wait_for("job pod Running", running_pod)
    # Nothing finishes it on its own: it stays Running, unfinished, for a stated 2 s window.
    watch_until = time.monotonic() + 2
    while time.monotonic() < watch_until:
        assert pod_phase(core, kube_namespace, pod.metadata.name) == "Running"
        assert not batch.read_namespaced_job("train", kube_namespace).status.succeeded
    # Finishing it by hand, as the portal's tests do, completes the Job.
    now = datetime.now(UTC).isoformat()
    core.patch_namespaced_pod_status(
        pod.metadata.name,
        kube_namespace,
        {
            "status": {
                "phase": "Succeeded",
                "containerStatuses": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 0,
                                "reason": "Completed",
                                "startedAt": now,
                                "finishedAt": now,
                            }
                        },
                    }
                ],
            }
        },
    )
    wait_for(
        "job complete",
        lambda: batch.read_namespaced_job("train", kube_namespace).status.succeeded == 1,
    )


def test_a_sleeping_pod_changed_while_it_runs_still_ends_when_its_sleep_does(
    kube_cluster, kube_namespace
):
    """KWOK computes a stage's delay again at every change of the pod, from then: a `sleep 4`
    pod labelled 2 s into its run ended 6 s after it started, before the stage counted from the
    pod's start. Now it ends at 4 s, or within the second after (the start is kept to the
    second)."""
    core, batch = kube_cluster.core, client.BatchV1Api(kube_cluster.api_client)
    pod_spec = gpu_pod("unused", {"nvidia.com/gpu": 1}, "gpu-h200-0")["spec"]
    pod_spec["containers"][0]["command"] = ["sleep", "4"]
    batch.create_namespaced_job(
        kube_namespace,
        {
            "metadata": {"name": "sleeper"},
            "spec": {"backoffLimit": 0, "template": {"spec": pod_spec}},
        },
    )

    def phase():
        pods = core.list_namespaced_pod(kube_namespace, label_selector="job-name=sleeper").items
        return (pods[0].metadata.name, pods[0].status.phase) if pods else (None, None)

    name = wait_for(
        "the pod running", lambda: phase()[1] == "Running" and phase()[0], interval=0.05
    )
    started = time.monotonic()
    time.sleep(2)
    core.patch_namespaced_pod(name, kube_namespace, {"metadata": {"labels": {"poked": "yes"}}})
    wait_for("the pod done", lambda: phase()[1] == "Succeeded", timeout=15, interval=0.05)
    ran = time.monotonic() - started
    # 4 s, up to 1 s more (the start is kept to the second), and the polling: not the 6 s of old
    assert 3.8 <= ran <= 5.5, f"ran {ran:.2f} s for a sleep of 4"


# --- quota -----------------------------------------------------------------------------------


def test_quota_on_requests_gpu_refuses_third_pod(kube_cluster, kube_namespace):
    core = kube_cluster.core
    core.create_namespaced_resource_quota(
        kube_namespace,
        {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}},
    )
    wait_quota_ready(core, kube_namespace, "gpus")
    for i in range(2):
        core.create_namespaced_pod(
            kube_namespace, gpu_pod(f"p{i}", {"nvidia.com/gpu": 1}, "gpu-rtx4090-0")
        )
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(
            kube_namespace, gpu_pod("p2", {"nvidia.com/gpu": 1}, "gpu-rtx4090-0")
        )
    assert err.value.status == 403
    assert "exceeded quota: gpus" in err.value.body
    assert "requests.nvidia.com/gpu" in err.value.body


def test_quota_limits_prefix_for_gpu_is_accepted_but_not_enforced(kube_cluster, kube_namespace):
    """Verified on v1.36.3 (as on 1.33 before): `limits.nvidia.com/gpu` (and a bare
    `nvidia.com/gpu`) pass validation, since any quota resource name containing '/' does, so the
    API server answers 201, not 422. The pod quota evaluator only counts extended resources as
    `requests.<name>`, so such lines are never tracked in status.used and never enforced. Only
    write requests.*."""
    core = kube_cluster.core
    hard = {"limits.nvidia.com/gpu": "1", "nvidia.com/gpu": "1"}
    quota = core.create_namespaced_resource_quota(
        kube_namespace, {"metadata": {"name": "gpu-limits"}, "spec": {"hard": hard}}
    )
    assert quota.spec.hard == hard
    wait_quota_ready(core, kube_namespace, "gpu-limits")
    for i in range(3):  # three GPUs against a "limit" of one: all admitted
        core.create_namespaced_pod(
            kube_namespace, gpu_pod(f"p{i}", {"nvidia.com/gpu": 1}, "gpu-h200-0")
        )
    wait_for(
        "pods Running",
        lambda: all(pod_phase(core, kube_namespace, f"p{i}") == "Running" for i in range(3)),
    )
    used = core.read_namespaced_resource_quota("gpu-limits", kube_namespace).status.used or {}
    assert not set(hard) & set(used)  # never tracked


# --- priority and preemption -----------------------------------------------------------------


def test_critical_pod_preempts_low_pod(kube_cluster, kube_namespace, priority_classes):
    core = kube_cluster.core
    node = "gpu-rtx4090-0"
    core.create_namespaced_pod(
        kube_namespace, gpu_pod("low", {"nvidia.com/gpu": 4}, node, "gpu-low")
    )
    wait_for("low pod Running", lambda: pod_phase(core, kube_namespace, "low") == "Running")
    core.create_namespaced_pod(
        kube_namespace, gpu_pod("critical", {"nvidia.com/gpu": 4}, node, "gpu-critical")
    )
    wait_for(
        "critical pod Running",
        lambda: pod_phase(core, kube_namespace, "critical") == "Running",
        timeout=60,
    )
    assert pod_phase(core, kube_namespace, "low") is None  # evicted and gone
    assert core.read_namespaced_pod("critical", kube_namespace).spec.priority == 1_000_000


def test_high_pod_does_not_preempt_equal_priority(kube_cluster, kube_namespace, priority_classes):
    core = kube_cluster.core
    node = "gpu-rtx4090-0"
    core.create_namespaced_pod(
        kube_namespace, gpu_pod("first", {"nvidia.com/gpu": 4}, node, "gpu-high")
    )
    wait_for("first pod Running", lambda: pod_phase(core, kube_namespace, "first") == "Running")
    core.create_namespaced_pod(
        kube_namespace, gpu_pod("second", {"nvidia.com/gpu": 4}, node, "gpu-high")
    )
    messages = wait_for(
        "FailedScheduling event", lambda: scheduling_failures(core, kube_namespace, "second")
    )
    assert any("No preemption victims found" in m for m in messages), messages
    time.sleep(2)  # give a (wrong) preemption the time it would need
    assert pod_phase(core, kube_namespace, "first") == "Running"
    second = core.read_namespaced_pod("second", kube_namespace)
    assert second.status.phase == "Pending"
    assert not second.status.nominated_node_name


# --- the MIG manager / device plugin simulator -----------------------------------------------

MIG, MIG_STATE = "nvidia.com/mig.config", "nvidia.com/mig.config.state"
DP, DP_STATE = "nvidia.com/device-plugin.config", "gpu-portal/device-plugin.config.state"


def test_simulator_applies_new_mig_layout(kube_cluster):
    core = kube_cluster.core
    node = "gpu-a100-0"
    seen: set[str] = set()
    try:
        relabel(core, node, MIG, "all-1g.10gb", MIG_STATE, "success", seen)
        assert "pending" in seen
        labels, alloc = node_state(core, node)
        assert alloc["nvidia.com/mig-1g.10gb"] == "28"
        assert alloc["nvidia.com/mig-3g.40gb"] == "0"  # kubelet keeps vanished resources at 0
        assert alloc["nvidia.com/gpu"] == "0"
        assert labels["nvidia.com/mig-1g.10gb.count"] == "28"
        assert "nvidia.com/mig-3g.40gb.count" not in labels
    finally:
        relabel(core, node, MIG, "mixed", MIG_STATE, "success")
    labels, alloc = node_state(core, node)
    assert {
        k: v for k, v in alloc.items() if k.startswith("nvidia.com/") and v != "0"
    } == SEED_GPU_ALLOCATABLE[node]
    assert labels["nvidia.com/mig-3g.40gb.count"] == "2"


def test_simulator_rejects_impossible_layout(kube_cluster):
    core = kube_cluster.core
    node = "gpu-a100-0"
    before = node_state(core, node)
    try:
        relabel(core, node, MIG, "invalid-3g-3g-1g", MIG_STATE, "failed")
        labels, alloc = node_state(core, node)
        assert alloc == before[1]
        assert {k: v for k, v in labels.items() if k not in (MIG, MIG_STATE)} == {
            k: v for k, v in before[0].items() if k not in (MIG, MIG_STATE)
        }
        events = core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={node},reason=MigConfigFailed"
        ).items
        assert any("cannot be placed" in e.message for e in events)
    finally:
        relabel(core, node, MIG, "mixed", MIG_STATE, "success")
    assert node_state(core, node)[1] == before[1]


def test_simulator_applies_time_slicing(kube_cluster):
    core = kube_cluster.core
    node = "gpu-rtx4090-0"
    try:
        relabel(core, node, DP, "time-sliced-4", DP_STATE, "success")
        labels, alloc = node_state(core, node)
        assert alloc["nvidia.com/gpu"] == "16"
        assert labels["nvidia.com/gpu.replicas"] == "4"
        assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    finally:
        relabel(core, node, DP, "default", DP_STATE, "success")
    labels, alloc = node_state(core, node)
    assert alloc["nvidia.com/gpu"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
