"""Pytest fixtures for tests against the local Kubernetes cluster.

Register with `pytest_plugins = ["localcluster.pytest_plugin"]` (root conftest.py) or
`-p localcluster.pytest_plugin`.

- kube_cluster (session): runs the same code as `python -m localcluster up` (builds the
  binaries on first use, starts what is not running) and returns a KubeCluster with
  `.kubeconfig` and a ready `.api_client`. If the binaries cannot be built or the cluster does
  not come up, the test fails with the reason; it is never skipped. The cluster is left running
  after the session so the next run starts in seconds (`make cluster-down` stops it).
- kube_worker (module, only for the tests that ask for it): a second cluster, a MultiKueue
  worker (worker.py), as a KubeCluster. Started if it does not run, and stopped when the
  module's tests end: it holds about 840 MiB and a second control plane and Kueue that take
  CPU from every test after it on a 2-core machine, and a warm start (binaries, PKI, etcd data
  and CRDs kept) takes 4 s. One already running (`python -m localcluster worker up`) is used
  and left running.
- kube_namespace (function): a fresh namespace per test, deleted afterwards (its pods are
  force-deleted first so their GPUs are free for the next test at once).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import build, cluster, worker


@dataclass
class KubeCluster:
    kubeconfig: Path
    api_client: client.ApiClient
    server: str

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: needs the local Kubernetes cluster (started by the session fixture)"
    )


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    problem = None
    try:
        cluster.up()
    except build.BuildError as exc:
        problem = f"cannot build the local cluster's Kubernetes binaries: {exc}"
    except (cluster.ClusterError, TimeoutError, OSError) as exc:
        problem = f"the local Kubernetes cluster did not come up: {exc} (logs: {cluster.LOGS})"
    if problem:  # outside the except block: the message alone, without a chained traceback
        pytest.fail(problem, pytrace=False)
    api = cluster.api_client()
    yield KubeCluster(kubeconfig=cluster.KUBECONFIG, api_client=api, server=cluster.server_url())
    api.close()


@pytest.fixture(scope="module")
def kube_worker() -> Iterator[KubeCluster]:
    was_running = bool(worker.pids()) and worker.ready()
    problem = None
    try:
        if not was_running:
            worker.up()
    except (cluster.ClusterError, OSError) as exc:
        problem = f"the local worker cluster did not come up: {exc} (logs: {worker.LOGS})"
    if problem:
        pytest.fail(problem, pytrace=False)
    api = worker.api_client()
    yield KubeCluster(kubeconfig=worker.KUBECONFIG, api_client=api, server=worker.server_url())
    api.close()
    if not was_running:
        worker.down()


def wait_for(what: str, check, timeout: float = 30, interval: float = 0.1):
    """Poll `check` until it returns something truthy (returned) or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def _namespace_name(node_name: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", node_name.lower()).strip("-")[:40].strip("-")
    return f"t-{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    core = kube_cluster.core
    name = _namespace_name(request.node.name)
    core.create_namespace({"metadata": {"name": name, "labels": {"gpu-portal.local/test": "true"}}})
    # The ServiceAccount admission plugin refuses pods until the controller made `default`.
    deadline = time.monotonic() + 30
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            break
        except ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    yield name
    try:
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        core.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise
