"""Inference services that really scale, on the local cluster (issue 33, item 2): a service with
min 1 / max 4 replicas scales up when its GPU use rises above target and back down when it
falls, through the real HorizontalPodAutoscaler controller (kube-controller-manager) reading a
real custom metrics API (the API server's aggregator, an APIService, the local adapter asking a
real Prometheus that scrapes the DCGM stand-in). Quota in use follows the pods Kueue admitted,
and the replica beyond the grant waits with the reason. KWOK pods run nothing: the probes and
the Service are proven as objects the API server accepts, not as traffic."""

from decimal import Decimal

import pytest
from django.urls import reverse

from catalog.services import set_pool
from localcluster.metrics_adapter import MetricsAdapter
from scheduler.workloads import services as workloads
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.models import WorkloadEvent
from scheduler.workloads.submit.spec import workload_spec
from tenants import selectors as tenant_selectors
from tests.scheduler.cluster_helpers import unique_slug, wait_for
from tests.scheduler.test_kueue_cluster import team, wait_state
from tests.tenants.factories import PoolFactory, ResourceClassFactory

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

METRIC = "DCGM_FI_DEV_GPU_UTIL"


@pytest.fixture
def h200(world):
    rc = ResourceClassFactory(
        slug="h200-141gb", gpu_model="H200-141GB", kind="whole", profile="",
        resource_name="nvidia.com/gpu", gpu_fraction=1, memory_gb=141,
    )  # fmt: skip
    PoolFactory(resource_class=rc, capacity=8)
    return rc


def _available(kube_admin, name: str) -> bool:
    service = kube_admin.get("APIService", name) or {}
    conditions = (service.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


@pytest.fixture
def metrics_api(kube_admin, prometheus_server):
    """The custom metrics API on the real API server, served from Prometheus by the local
    adapter; unregistered afterwards (an APIService left without its server makes discovery of
    the whole cluster report the group unavailable)."""

    def pods(namespace: str, selector: str) -> list[str]:
        return [
            p["metadata"]["name"]
            for p in kube_admin.list("Pod", namespace, label_selector=selector)
        ]

    adapter = MetricsAdapter(prometheus_server.url, [METRIC], pods)
    adapter.start()
    objects = adapter.registration()
    for obj in objects:
        kube_admin.apply(obj)
    name = objects[-1]["metadata"]["name"]
    wait_for("the custom metrics API available", lambda: _available(kube_admin, name), 60)
    yield adapter
    for obj in reversed(objects):
        kube_admin.delete(obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))
    adapter.stop()


def _pods(kube, w) -> list[dict]:
    return kube.list("Pod", w.namespace, label_selector=f"{WORKLOAD_LABEL}={w.pk}")


def _in_use(tenant, rc) -> int:
    lines = {line.resource_class.slug: line for line in tenant_selectors.quota_lines(tenant)}
    return lines[rc.slug].in_use


def test_a_service_scales_up_on_its_metric_waits_beyond_the_grant_and_scales_back_down(
    kube, tenant_namespaces, world, h200, settings, client, dcgm, metrics_api
):
    settings.PORTAL_INSTANCE = unique_slug("inf")  # a cohort of its own
    settings.AUTOSCALING_SCALE_DOWN_WINDOW_S = 0  # down as soon as the metric is low
    set_pool(actor=world.admin, resource_class=h200, borrowing_limit=0)
    tenant = team(world, kube, tenant_namespaces, h200, 3, prefix="inf")
    w = workloads.submit_workload(
        actor=world.admin,
        tenant=tenant,
        spec=workload_spec(
            name="serve",
            kind="deployment",
            image="registry.k8s.io/pause:3.10",
            resources={h200.slug: 1},
            priority="gpu-low",
            autoscaling={"min_replicas": 1, "max_replicas": 4, "target_gpu_util": 50},
            ports=[{"name": "http", "port": 8080}],
            probes={
                "readiness": {"path": "/ready", "port": "http"},
                "liveness": {"path": "/healthz", "port": 8080},
            },
        ),
    )
    workload_sync.create_in_cluster(kube, w.pk)
    service = kube.get("Service", w.k8s_name, w.namespace)
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    wait_state(kube, w, "running")
    dcgm.namespaces.add(w.namespace)

    def busy(util: str):
        """Every running pod of the service at `util` (new replicas too, as they start)."""
        for pod in _pods(kube, w):
            if (pod.get("status") or {}).get("phase") == "Running":
                dcgm.util[(w.namespace, pod["metadata"]["name"])] = Decimal(util)

    def scaled_to(util: str, held: int, desired: int, running: str, timeout: float = 60):
        seen = []

        def check():
            busy(util)
            got = workload_sync.sync_workload(kube, w.pk)
            seen[:] = [(got.held_replicas, got.desired_replicas, got.reason, got.message)]
            counts = (got.held_replicas, got.desired_replicas)
            return got if counts == (held, desired) and running in got.message else None

        try:
            return wait_for(f"{held} admitted of {desired} wanted", check, timeout=timeout)
        except AssertionError as exc:
            hpa = kube.get("HorizontalPodAutoscaler", w.k8s_name, w.namespace) or {}
            raise AssertionError(
                f"{exc}; last seen {seen}; adapter asked {metrics_api.requests} times, "
                f"error {metrics_api.last_error!r}; HPA status {hpa.get('status')}"
            ) from None

    # 90 % against a target of 50 %: up to the max, 4; the grant holds 3, the 4th waits
    got = scaled_to("0.9", 3, 4, "3/4 running")
    assert got.state == "running"
    assert got.reason == "PartlyRunning"
    assert "1 waiting for room in the team's quota" in got.message
    assert _in_use(tenant, h200) == 3  # the pods admitted, not max_replicas (4)
    assert metrics_api.requests > 0  # the HPA asked the adapter, through the aggregator

    # 10 %: back down to the minimum, and the quota in use with it
    got = scaled_to("0.1", 1, 1, "1/1 running")
    assert got.reason == "Running"
    assert _in_use(tenant, h200) == 1

    scaled = list(WorkloadEvent.objects.filter(workload=w, reason="Scaled"))
    assert scaled[0].message.startswith("1 → ")
    assert scaled[-1].message.startswith("4 → 1") or scaled[-1].message.endswith(
        "→ 1 replicas (1 admitted)"
    )

    client.force_login(world.admin)
    page = client.get(reverse("scheduler:workload_scaling", args=[w.pk])).content.decode()
    assert METRIC in page and "SuccessfulRescale" in page
    assert "above target" in page or "below target" in page
