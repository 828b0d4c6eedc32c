"""An inference service that scales on the requests it is sent (issue 50, item 4), on the local
cluster's real node: the portal deploys the inference stand-in (`serve.py`) with a target of 5
requests per second per replica; a Job inside the cluster sends it about 30 a second through its
Service's DNS name; the real HorizontalPodAutoscaler (kube-controller-manager, a 5 s sync)
reads `requests_per_second` from the custom metrics API (the API server's aggregator, an
APIService, the local adapter scraping each pod's `requests_total`,
`localcluster/pod_rates.py`), scales the service above 1 replica, and the new replicas take
their share of the load; once the Job is gone, it scales back to 1.

The load comes from the platform's namespace, which the team's NetworkPolicy lets in (as it
lets in the portal's activity reader): a client in the team's own namespace would be queued by
Kueue and take a GPU of the grant the replicas scale into."""

import pytest

from localcluster import realnode
from localcluster.metrics_adapter import MetricsAdapter
from localcluster.pod_rates import PodRates
from scheduler.workloads.kinds.scaling import scaling_view
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.models import WorkloadEvent
from tests.realnode.test_real_node_cluster import DEMO, b200, pods_of, settled, submit, team
from tests.scheduler.cluster_helpers import restricted_pod, unique_slug, wait_for
from tests.scheduler.test_inference_cluster import _available

__all__ = ["b200"]  # the fixture, shared with test_real_node_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

METRIC = "requests_per_second"
TARGET_PER_S = 5  # per replica
LOAD_PER_S = 30  # in all: 6 replicas' worth, so the HPA wants its maximum, 3
WINDOW_S = 15  # the adapter's rate window: the rate is 0 this long after the load stops

# Sends `per_s` requests a second to the service from `threads` threads, a new connection
# each (so kube-proxy spreads them over the endpoints), until its pod is deleted.
LOAD = """
import sys, threading, time, urllib.request
url, per_s, threads = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
body = ("[" + ",".join(["0.5"] * 16) + "]").encode()
done = {"answered": 0, "failed": 0}
def send():
    gap = threads / per_s
    while True:
        start = time.monotonic()
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=5).read()
            done["answered"] += 1
        except OSError:
            done["failed"] += 1
        time.sleep(max(0.0, gap - (time.monotonic() - start)))
for _ in range(threads):
    threading.Thread(target=send, daemon=True).start()
while True:
    time.sleep(5)
    print(done, flush=True)
"""


@pytest.fixture
def request_rates(kube_admin, settings):
    """The custom metrics API on the real API server, serving each pod's requests per second
    from its own /metrics; unregistered afterwards (an APIService left without its server
    makes discovery of the whole cluster report the group unavailable)."""
    settings.AUTOSCALING_REQUEST_RATE_METRIC = METRIC
    rates = PodRates(
        lambda namespace, selector: kube_admin.list("Pod", namespace, label_selector=selector),
        {METRIC: "requests_total"},
        window_s=WINDOW_S,
    )
    adapter = MetricsAdapter("", [], lambda namespace, selector: [], rates=rates)
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


def load_job(name: str, namespace: str, url: str) -> dict:
    """A Job on the real node that sends LOAD_PER_S requests a second to `url`."""
    pod = restricted_pod("load", {})
    container = pod["spec"]["containers"][0]
    container["image"] = DEMO
    container["imagePullPolicy"] = "Never"
    container["command"] = ["python", "-c", LOAD, url, str(LOAD_PER_S), "6"]
    pod["spec"]["nodeName"] = realnode.NODE_NAME
    pod["spec"]["tolerations"] = [{"operator": "Exists"}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 300,  # never left sending if the test dies
            "ttlSecondsAfterFinished": 60,
            "template": {"spec": pod["spec"]},
        },
    }


def ready(pod: dict) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions") or []
    )


def test_a_service_scales_up_on_requests_sent_from_inside_the_cluster_and_back_down(
    kube, kube_cluster, kube_admin, tenant_namespaces, world, b200, settings, request_rates
):
    settings.AUTOSCALING_SCALE_DOWN_WINDOW_S = 0  # down as soon as the rate is low
    tenant = team(world, kube, tenant_namespaces, b200, 3, "rq")
    service = submit(
        kube,
        world,
        tenant,
        b200,
        name="echo",
        kind="deployment",
        command=["python", "/opt/demo/serve.py"],
        ports=[8080],
        probes={"readiness": {"path": "/healthz", "port": "http"}},
        autoscaling={"min_replicas": 1, "max_replicas": 3, "target_requests_per_s": TARGET_PER_S},
    )
    namespace = tenant.namespace
    settled(kube, service, {"running"})
    hpa = kube.get("HorizontalPodAutoscaler", service.k8s_name, namespace)
    assert [(m.name, m.target) for m in scaling_view(hpa, []).metrics] == [(METRIC, "5")]
    rates = request_rates.rates

    def diagnosis() -> str:
        hpa = kube.get("HorizontalPodAutoscaler", service.k8s_name, namespace) or {}
        return (
            f"adapter asked {request_rates.requests} times, error {request_rates.last_error!r}, "
            f"scrape error {rates.last_error!r}, rates {rates.last}; HPA status "
            f"{hpa.get('status')}"
        )

    def hpa_reads_its_metric() -> bool:
        hpa = kube.get("HorizontalPodAutoscaler", service.k8s_name, namespace) or {}
        view = scaling_view(hpa, [])
        return any(c.kind == "ScalingActive" and c.ok for c in view.conditions)

    try:  # idle: the adapter answers 0 for the one replica, through the aggregator
        wait_for("the HPA reading its metric", hpa_reads_its_metric, timeout=60, interval=1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {diagnosis()}") from None

    url = f"http://{service.k8s_name}.{namespace}.svc.cluster.local:8080/v1/predict"
    job = f"load-{unique_slug('rq')}"
    platform = settings.PLATFORM_NAMESPACE
    seen: list = []  # what the last look saw, for the failure's message

    def scaled_up():
        got = workload_sync.sync_workload(kube, service.pk)
        live = {p["metadata"]["name"] for p in pods_of(kube, namespace) if ready(p)}
        busy = {
            pod for (ns, pod), per_s in dict(rates.last).items()
            if ns == namespace and pod in live and per_s > 0
        }  # fmt: skip
        seen[:] = [(got.held_replicas, got.desired_replicas, sorted(busy), got.message)]
        wanted, held = got.desired_replicas or 0, got.held_replicas or 0
        return wanted >= 2 and held >= 2 and len(busy) >= 2

    kube_admin.create(load_job(job, platform, url))
    try:  # above 1 replica, and a new replica answers its share of the requests
        wait_for("the service scaled up under load", scaled_up, timeout=90, interval=1)
    except AssertionError as exc:
        log = _job_log(kube_admin, platform, job)
        raise AssertionError(f"{exc}; last seen {seen}; {diagnosis()}; load: {log}") from None
    finally:
        kube_admin.delete("Job", job, platform)  # the load stops

    def scaled_down():
        got = workload_sync.sync_workload(kube, service.pk)
        hpa = kube.get("HorizontalPodAutoscaler", service.k8s_name, namespace) or {}
        (metric,) = scaling_view(hpa, []).metrics
        seen[:] = [(got.held_replicas, got.desired_replicas, metric.current, got.message)]
        # back at 1, and the HPA read no request since the load went (the window has passed)
        return (got.held_replicas, got.desired_replicas, metric.current) == (1, 1, "0")

    try:
        wait_for("the service back at 1 replica", scaled_down, timeout=90, interval=1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}; {diagnosis()}") from None
    scaled = [e.message for e in WorkloadEvent.objects.filter(workload=service, reason="Scaled")]
    assert scaled[0].startswith("1 → ") and scaled[-1].startswith(tuple(f"{n} → 1" for n in (2, 3)))


def _job_log(kube_admin, namespace: str, job: str) -> str:
    pods = kube_admin.list("Pod", namespace, label_selector=f"job-name={job}")
    if not pods:
        return "no pod"
    try:
        return kube_admin.pod_log(pods[0]["metadata"]["name"], namespace, tail_lines=5)
    except Exception as exc:  # noqa: BLE001 (a diagnosis; the assertion says what failed)
        return f"no log: {exc}"
