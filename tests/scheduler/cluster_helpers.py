"""Helpers for tests against the local cluster."""

import os
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.fleet import gpu_tolerations
from localcluster.pytest_plugin import wait_for  # noqa: F401 - re-exported for the tests
from scheduler.cluster import kube as kube_module
from scheduler.cluster.kube import KubeGateway
from scheduler.mig import publishing


def as_user(kube_cluster, username: str) -> KubeGateway:
    """A gateway that acts as `username` (impersonated by the local admin): what a team member
    can do with the kubectl access the portal binds for them."""
    gateway = KubeGateway.from_kubeconfig(str(kube_cluster.kubeconfig))
    gateway.api.set_default_header("Impersonate-User", username)
    return gateway


def wait_until_refused(gateway: KubeGateway, manifest: dict, message: str, what: str) -> None:
    """Wait until a dry-run create of `manifest` is refused with `message`: an admission policy
    just applied takes a moment to be enforced."""
    from core.errors import ClusterError

    def refused() -> bool:
        try:
            gateway.create(manifest, dry_run=True)
        except ClusterError as exc:
            return message in str(exc)
        return False

    wait_for(what, refused, timeout=30)


@contextmanager
def celery_worker(queues: list[str], concurrency: int = 1):
    """A real Celery worker (threads) on the tests' broker, consuming `queues`."""
    from celery.contrib.testing.worker import start_worker

    from portal.celery import app

    app.control.purge()  # messages a portal left in the tests' broker database are not ours
    with start_worker(
        app,
        pool="threads",
        concurrency=concurrency,
        perform_ping_check=False,
        shutdown_timeout=30,
        queues=queues,
    ) as worker:
        yield worker


@contextmanager
def kueue_restarted_with(pods_ready: Mapping[str, str]) -> Iterator[None]:
    """Kueue reads its Configuration once, at start: run it with `pods_ready` (PodsReady's
    fields -> values, as their KUEUE_PODS_READY_* names say them) and restore the suite's after.
    """
    from catalog.kueue_config import PODS_READY_ENV
    from localcluster import cluster

    names = {PODS_READY_ENV[field]: value for field, value in pods_ready.items()}
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        cluster.up()  # restarts Kueue: its generated configuration changed
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        cluster.up()


def unique_slug(prefix="rt") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def restricted_pod(name: str, resources: dict[str, int], priority_class: str | None = None) -> dict:
    """A pod that the `restricted` Pod Security level admits; one that asks for a GPU tolerates
    the GPU nodes' taint (as a team member's pod must to land there outside the portal's queue;
    the queue guard refuses the toleration to a pod that asks for none)."""
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
    if any(k.startswith("nvidia.com/") for k in resources):
        spec["tolerations"] = gpu_tolerations()
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="session")
def portal_kubeconfig(kube_cluster) -> str:
    """A kubeconfig acting as the portal's ServiceAccount with the Helm chart's RBAC."""
    from localcluster import portal_account

    try:
        return str(portal_account.kubeconfig())
    except portal_account.PortalAccountError as exc:
        pytest.fail(f"cannot set up the portal's ServiceAccount: {exc}", pytrace=False)


@pytest.fixture
def kube(kube_cluster, portal_kubeconfig, settings) -> Iterator[KubeGateway]:
    """A fresh, counted gateway to the local cluster as the portal's own ServiceAccount (the
    chart's least-privilege RBAC, not an admin); the process-wide one acts as it too."""
    settings.KUBECONFIG = portal_kubeconfig
    kube_module.reset_gateway()
    gateway = KubeGateway.from_kubeconfig(portal_kubeconfig)
    yield gateway
    kube_module.reset_gateway()


@pytest.fixture
def kube_admin(kube_cluster) -> KubeGateway:
    """The local cluster's admin, for set-up that is not the portal's to do: pods and volumes
    of a test's own, node changes the simulated GPU operator would make."""
    return KubeGateway.from_kubeconfig(str(kube_cluster.kubeconfig))


@pytest.fixture
def tenant_namespaces(kube, kube_cluster):
    """Namespaces a test's tenants got; deleted afterwards whatever the test did."""
    names: list[str] = []
    yield names
    for name in names:
        kube.delete("Namespace", name)
        # a team's Kueue ClusterQueue is cluster-scoped and named like its namespace: left
        # behind, its quota would stay in the cohort for other tests to borrow
        kube.delete("ClusterQueue", name)
    # The namespace controller reaches the pods and jobs only after seconds (five per test,
    # measured), and until then their GPUs are held and their Kueue Workloads keep the
    # ClusterQueue (in the cohort) with its quota: a next test that counts free units or
    # borrows from the cohort would find them taken. A terminating namespace takes no new
    # objects, so what holds GPUs or quota is removed now, pods without their grace; leave
    # when the pods and the ClusterQueues are gone.
    apps, batch = (
        client.AppsV1Api(kube_cluster.api_client),
        client.BatchV1Api(kube_cluster.api_client),
    )
    for name in names:
        for remove in (
            batch.delete_collection_namespaced_job,
            apps.delete_collection_namespaced_deployment,
            apps.delete_collection_namespaced_stateful_set,
        ):
            _gone_or_done(remove, name, propagation_policy="Background")
        _gone_or_done(
            kube_cluster.core.delete_collection_namespaced_pod, name, grace_period_seconds=0
        )
    wait_for(
        "the test's tenant pods and ClusterQueues gone",
        lambda: not any(kube.list("Pod", name) or kube.get("ClusterQueue", name) for name in names),
        timeout=60,
    )


def _gone_or_done(remove, namespace: str, **options) -> None:
    try:
        remove(namespace, **options)
    except ApiException as exc:
        if exc.status != 404:
            raise


def wait_for_quota(kube, namespace: str) -> None:
    """Until the API server has counted the namespace's ResourceQuota (its status says `hard`):
    before that, a pod the quota would admit may be refused."""
    wait_for(
        "quota status",
        lambda: (
            (kube.get("ResourceQuota", "gpu-portal-quota", namespace) or {})
            .get("status", {})
            .get("hard")
        ),
    )


def h100_h200_team(world, kube, tenant_namespaces, prefix: str, name: str):
    """A fresh tenant allowed gpu-critical (one unit) and gpu-low, whose namespace is registered
    for clean-up, with pools of H100 3g.40gb slices and whole H200s; returns (tenant, mig, h200).
    Grants, reconciling the namespace and waiting for its quota are the caller's."""
    from scheduler.cluster.reconcile.runs import reconcile_cluster_objects
    from scheduler.cluster.reconcile.specs import tenant_namespace
    from tenants.services import tenants as tenant_services
    from tests.tenants.factories import PoolFactory, ResourceClassFactory

    tenant = tenant_services.create_tenant(
        actor=world.admin,
        slug=unique_slug(prefix),
        name=name,
        allowed_priority_classes=["gpu-critical", "gpu-low"],
    )
    # a ceiling of its own: the platform's default (8 GPU-equivalents) is below what tests grant
    tenant_services.update_tenant(
        actor=world.admin, tenant=tenant, critical_gpu_quota=1, gpu_ceiling=Decimal(64)
    )
    mig = ResourceClassFactory(
        slug="h100-80gb-mig-3g.40gb", gpu_model="H100-80GB", resource_name="nvidia.com/mig-3g.40gb"
    )
    h200 = ResourceClassFactory(
        slug="h200-141gb",
        gpu_model="H200-141GB",
        kind="whole",
        profile="",
        resource_name="nvidia.com/gpu",
        gpu_fraction=1,
        memory_gb=141,
    )
    PoolFactory(resource_class=mig, capacity=16)
    PoolFactory(resource_class=h200, capacity=16)
    tenant_namespaces.append(tenant_namespace(tenant))
    reconcile_cluster_objects(kube)
    return tenant, mig, h200


def gpu_pod_on(kube, namespace, node, name, labels=None, tolerations=()):
    """A running pod holding one MIG 1g slice, bound to `node` (what a drain must move);
    `tolerations` beyond the GPU taints', for a node tainted for one test."""
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                # bound by name, but as a GPU pod would be
                "tolerations": gpu_tolerations() + list(tolerations),
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {
                            "limits": {"nvidia.com/mig-1g.10gb": "1"},
                            "requests": {"nvidia.com/mig-1g.10gb": "1"},
                        },
                    }
                ],
            },
        }
    )
    wait_for(
        f"{name} running",
        lambda: (
            (kube.get("Pod", name, namespace) or {}).get("status", {}).get("phase") == "Running"
        ),
    )


def scheduled_pod_for(kube, namespace, node, name, resource: str | None = None) -> None:
    """A pod kube-scheduler places on `node` (a hostname selector), asking one unit of
    `resource` (a GPU resource) or none."""
    container: dict = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    if resource:
        container["resources"] = {"limits": {resource: "1"}, "requests": {resource: "1"}}
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "tolerations": gpu_tolerations(),
                "containers": [container],
                "terminationGracePeriodSeconds": 0,
            },
        }
    )


def delete_published_configs(kube) -> None:
    """The ConfigMaps a rollout published (`publishing.publish_configs`)."""
    for kind in ("mig-parted", "device-plugin"):
        kube.delete("ConfigMap", publishing.config_map_name(kind), publishing.operator_namespace())


def node_ready(kube, name) -> bool:
    conditions = (kube.get("Node", name) or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def no_disruption_budget(name: str, namespace: str, selector: dict) -> dict:
    """A PodDisruptionBudget that lets none of the selected pods be evicted."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}},
    }
