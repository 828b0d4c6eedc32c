"""The second local cluster, a MultiKueue worker: where its state and ports go, what it runs and
what its Kueue and the manager's are given (pure: nothing is started)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from catalog import kueue_config
from localcluster import base, components, fleet, kueue, worker

BINS = {
    name: base.REPO_ROOT / name
    for name in (
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
        "kueue",
        "jobset",
    )
}
MAIN_PORTS = range(6443, 6461)  # the main cluster's API port and the ports after it it uses


def test_the_worker_lives_beside_the_main_cluster_with_ports_of_its_own(monkeypatch):
    monkeypatch.delenv("LOCALCLUSTER_PORT", raising=False)
    monkeypatch.delenv("LOCALCLUSTER_WORKER_PORT", raising=False)
    env = worker.environ({"LOCALCLUSTER_PORT": "6443", "GPU_QUOTA_UNIT": "class"})
    assert env["LOCALCLUSTER_DIR"] == str(base.LOCAL_DIR / "worker")
    assert env["LOCALCLUSTER_ROLE"] == base.ROLE_WORKER
    assert env["LOCALCLUSTER_REAL_NODE"] == "0"
    assert env["GPU_QUOTA_UNIT"] == "class"  # the manager's Kueue settings, the same
    port = int(env["LOCALCLUSTER_PORT"])
    assert port == 6443 + worker.PORT_OFFSET
    # its API server, etcd (+1, +2) and Kueue (+3..+5) miss every port of the main cluster
    assert not set(range(port, port + 6)) & set(MAIN_PORTS)
    monkeypatch.setenv("LOCALCLUSTER_WORKER_PORT", "7000")
    assert worker.environ()["LOCALCLUSTER_PORT"] == "7000"
    assert "LOCALCLUSTER_WORKER_PORT" not in worker.environ()


def test_a_worker_runs_its_control_plane_kwok_kueue_and_jobset_only(monkeypatch):
    monkeypatch.setenv("LOCALCLUSTER_ROLE", base.ROLE_WORKER)
    monkeypatch.setenv("LOCALCLUSTER_REAL_NODE", "1")  # asked for, refused: one per machine
    names = [c.name for c in components.component_specs(BINS)]
    assert names == [
        "etcd",
        "kube-apiserver",
        "jobset",
        "kueue",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ]
    monkeypatch.delenv("LOCALCLUSTER_ROLE")
    monkeypatch.setenv("LOCALCLUSTER_REAL_NODE", "0")
    full = [c.name for c in components.component_specs(BINS)]
    assert set(full) - set(names) == {"gpu-simulator"}


def test_a_worker_has_two_of_the_fleets_nodes(monkeypatch):
    monkeypatch.setenv(fleet.FLEET_NODES_ENV, ",".join(worker.NODES))
    assert [n["name"] for n in fleet.node_templates()] == list(worker.NODES)
    monkeypatch.setenv(fleet.FLEET_NODES_ENV, "gpu-h200-0,no-such-node")
    with pytest.raises(ValueError, match="no-such-node"):
        fleet.node_templates()
    monkeypatch.delenv(fleet.FLEET_NODES_ENV)
    assert len(fleet.node_templates()) == 5


def test_the_manager_runs_multikueue_with_the_portals_dispatcher_and_a_worker_without(
    monkeypatch,
):
    monkeypatch.delenv("LOCALCLUSTER_ROLE", raising=False)
    manager_gates = kueue.feature_gates(worker=False).split(",")
    for gate in kueue_config.MULTIKUEUE_GATES:
        assert f"{gate}=true" in manager_gates
    # the incremental dispatcher, and a lost worker's work queued again after 30 s
    assert kueue.config()["multiKueue"] == kueue_config.multikueue_section(
        worker_lost_s=kueue.WORKER_LOST_S
    )
    assert kueue.config()["multiKueue"]["workerLostTimeout"] == "30s"
    monkeypatch.setenv("LOCALCLUSTER_ROLE", base.ROLE_WORKER)
    assert "MultiKueue=false" in kueue.feature_gates(worker=True).split(",")
    assert "multiKueue" not in kueue.config()


def test_the_environment_moves_the_state_of_a_cluster_process():
    # read at import: a worker is another process started with it set
    out = subprocess.run(
        [sys.executable, "-c", "from localcluster import base; print(base.KUBECONFIG)"],
        env={**worker.environ(), "PATH": ""},
        cwd=base.REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(worker.KUBECONFIG)
