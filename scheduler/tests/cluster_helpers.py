"""Helpers for tests against the local cluster."""

import uuid

import pytest

from localcluster.pytest_plugin import wait_for  # noqa: F401 - re-exported for the tests
from scheduler import kube as kube_module
from scheduler.kube import KubeGateway


def unique_slug(prefix="rt") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def restricted_pod(name: str, resources: dict[str, int], priority_class: str | None = None) -> dict:
    """A pod that the `restricted` Pod Security level admits."""
    limits = {k: str(v) for k, v in resources.items()}
    spec = {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": limits, "requests": dict(limits)},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def kube(kube_cluster, settings) -> KubeGateway:
    """A fresh, counted gateway to the local cluster; the process-wide one points there too."""
    settings.KUBECONFIG = str(kube_cluster.kubeconfig)
    kube_module.reset_gateway()
    gateway = KubeGateway.from_kubeconfig(str(kube_cluster.kubeconfig))
    yield gateway
    kube_module.reset_gateway()


@pytest.fixture
def tenant_namespaces(kube):
    """Namespaces a test's tenants got; deleted afterwards whatever the test did."""
    names: list[str] = []
    yield names
    for name in names:
        kube.delete("Namespace", name)
