"""A second local cluster beside the main one: a MultiKueue worker, with its own etcd,
kube-apiserver, controller-manager, scheduler, KWOK with two of the fleet's GPU nodes, and its
own Kueue and JobSet controller, from the same built binaries.

It is the same code as the main cluster (`cluster.up`), run in a child process whose
environment moves it (base.py, fleet.py):

- LOCALCLUSTER_DIR=<main's .local>/worker: its state, PKI, logs and kubeconfig;
- LOCALCLUSTER_PORT=<main's API port> + 100 (LOCALCLUSTER_WORKER_PORT to choose): its API
  server, and etcd and Kueue on the ports after it, as base.py derives them (+1 to +5);
- LOCALCLUSTER_ROLE=worker: no GPU simulator, no real node (its bridge and kubelet ports are
  one per machine), and Kueue with MultiKueue off (kueue.py); JobSet runs, since MultiKueue
  refuses a worker that lacks a kind the manager's Kueue integrates (components.py);
- LOCALCLUSTER_FLEET_NODES: two of fleet.yaml's nodes, not the five.

The main cluster is the fleet's manager: its Kueue dispatches to this one through a
MultiKueueCluster whose kubeconfig Secret holds `kubeconfig_text()` (CA and token embedded, as
MultiKueue requires). `python -m localcluster worker up|down|status`; the pytest fixture
`kube_worker` (pytest_plugin.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from kubernetes import config
from kubernetes.client import ApiClient

from .base import LOCAL_DIR, REPO_ROOT, ROLE_WORKER, ClusterError, api_port, log

PORT_OFFSET = 100  # the main cluster uses its API port + 0..14 (real node included)
NODES = ("gpu-h100-0", "gpu-h200-0")
DIR = LOCAL_DIR / "worker"
KUBECONFIG = DIR / "kubeconfig"
STATE_DIR = DIR / "cluster"
RUN = STATE_DIR / "run"
LOGS = STATE_DIR / "logs"


def port() -> int:
    return int(os.environ.get("LOCALCLUSTER_WORKER_PORT") or api_port() + PORT_OFFSET)


def server_url() -> str:
    return f"https://127.0.0.1:{port()}"


def environ(base: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: the caller's (so Kueue reads the same GPU_QUOTA_UNIT,
    KUEUE_INTEGRATIONS, KUEUE_PODS_READY_* as the manager's) with the cluster moved."""
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "LOCALCLUSTER_DIR": str(DIR),
            "LOCALCLUSTER_PORT": str(port()),
            "LOCALCLUSTER_ROLE": ROLE_WORKER,
            "LOCALCLUSTER_REAL_NODE": "0",
            "LOCALCLUSTER_FLEET_NODES": ",".join(NODES),
        }
    )
    env.pop("LOCALCLUSTER_WORKER_PORT", None)
    return env


def _localcluster(*args: str, timeout: float, quiet: bool = False) -> int:
    """Run `python -m localcluster ARGS` as the worker; its stderr (progress) passes through."""
    try:
        res = subprocess.run(
            [sys.executable, "-m", "localcluster", *args],
            env=environ(),
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL if quiet else None,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"the worker's `{' '.join(args)}` ran over {timeout:.0f} s") from exc
    return res.returncode


def up(timeout: float = 300) -> float:
    """Start what of the worker is not running (building nothing the main cluster has not
    built); returns the seconds it took."""
    t0 = time.monotonic()
    log(f"worker: starting in {DIR} on {server_url()}")
    if _localcluster("up", timeout=timeout) != 0:
        raise ClusterError(f"the worker cluster did not come up (logs: {LOGS})")
    return time.monotonic() - t0


def down(timeout: float = 120) -> None:
    if _localcluster("down", timeout=timeout) != 0:
        raise ClusterError(f"stopping the worker cluster failed (logs: {LOGS})")


def ready(timeout: float = 60) -> bool:
    """Every component runs and the API server and Kueue answer (`status`' exit code)."""
    return _localcluster("status", timeout=timeout, quiet=True) == 0


def pids() -> dict[str, int]:
    """The worker's running processes (their pid files, checked against /proc)."""
    out = {}
    for pidfile in sorted(RUN.glob("*.pid")) if RUN.is_dir() else []:
        try:
            pid = int(pidfile.read_text())
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError):
            continue
        if state != "Z":
            out[pidfile.stem] = pid
    return out


def memory_mib() -> dict[str, float]:
    """Resident memory of each running worker process, MiB (VmRSS)."""
    out = {}
    for name, pid in pids().items():
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if line.startswith("VmRSS:"):
                out[name] = int(line.split()[1]) / 1024
    return out


def status() -> int:
    code = _localcluster("status", timeout=60)
    mem = memory_mib()
    if mem:
        shown = ", ".join(f"{name} {mib:.0f}" for name, mib in sorted(mem.items()))
        print(f"{'memory (MiB resident)':24} {sum(mem.values()):.0f} in all: {shown}")
    return code


def kubeconfig_text() -> str:
    """The worker's admin kubeconfig: CA and token embedded, server 127.0.0.1, which
    MultiKueue accepts from a Secret."""
    try:
        return KUBECONFIG.read_text()
    except OSError as exc:
        raise ClusterError(f"no worker kubeconfig at {KUBECONFIG}: run the worker first") from exc


def api_client() -> ApiClient:
    return config.new_client_from_config(config_file=str(KUBECONFIG))
