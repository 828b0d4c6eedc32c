"""GPU metrics for the demo (`make run`, `python -m demo`): what the tests run for one test, run
for the portal.

The DCGM exporter stand-in (`dcgm.py`) serves series for the GPU pods of every team namespace,
Debian's Prometheus scrapes it, and the custom metrics adapter (`metrics_adapter.py`) serves
them to the API server's aggregator, so an autoscaled inference service scales in the demo as
it does in the tests, and the portal's utilisation source (PROMETHEUS_URL) knows what is used
and what sits idle. Nothing runs real work here, so each pod's utilisation is made up, but
steadily: a function of its name (some pods busy, some idle), or the value a pod's annotation
`gpu-portal.io/demo-util` (0-1) gives it, so the demo can be steered.

The same adapter serves each service's requests per second (`AUTOSCALING_REQUEST_RATE_METRIC`),
read from the pods' own `/metrics` (the inference stand-in's `requests_total` on the real node,
`localcluster/pod_rates.py`), so a service with `target_requests_per_s` scales on real load.

Runs until stopped (SIGINT or SIGTERM), then unregisters the metrics API: an APIService left
without its server makes discovery of the whole cluster report the group unavailable.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import threading
from decimal import Decimal
from pathlib import Path

from localcluster.base import KUBECONFIG, LOCAL_DIR

DEMO_UTIL_ANNOTATION = "gpu-portal.io/demo-util"
ENV_FILE = LOCAL_DIR / "demo-metrics.env"  # PROMETHEUS_URL=..., for the portal's processes


def demo_util(pod: dict) -> Decimal:
    """A pod's made-up utilisation (0-1): its annotation's, else one of five steady levels
    chosen by its name (pure)."""
    meta = pod.get("metadata") or {}
    given = (meta.get("annotations") or {}).get(DEMO_UTIL_ANNOTATION)
    try:
        if given is not None and 0 <= Decimal(given) <= 1:
            return Decimal(given)
    except ArithmeticError:
        pass
    levels = ("0.05", "0.15", "0.55", "0.8", "0.95")
    digest = hashlib.sha256(meta.get("name", "").encode()).digest()
    return Decimal(levels[digest[0] % len(levels)])


def serve(kubeconfig: Path = KUBECONFIG, env_file: Path = ENV_FILE) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.dev")
    import django

    django.setup()
    from django.conf import settings

    from demo.dcgm import DcgmStandin
    from demo.prometheus import PrometheusServer
    from localcluster.metrics_adapter import MetricsAdapter
    from localcluster.pod_rates import PodRates
    from scheduler.cluster.kube import KubeGateway
    from scheduler.cluster.render.labels import TENANT_LABEL

    if PrometheusServer.binary() is None:
        print(
            "demo metrics: Debian's prometheus is missing: run scripts/bootstrap.sh",
            file=sys.stderr,
        )
        return 1
    kube = KubeGateway.from_kubeconfig(str(kubeconfig))

    class Standin(DcgmStandin):
        def render(self) -> str:
            # every team namespace, as it is now, each pod at its demo level
            self.namespaces = {
                ns["metadata"]["name"]
                for ns in self.kube.list("Namespace", label_selector=TENANT_LABEL)
            }
            for namespace in self.namespaces:
                for pod in self.kube.list("Pod", namespace):
                    self.util[(namespace, pod["metadata"]["name"])] = demo_util(pod)
            return super().render()

    dcgm = Standin(kube)
    prometheus = PrometheusServer([f"127.0.0.1:{dcgm.start()}"], scrape_interval="5s")
    prometheus.start()

    def pods(namespace: str, selector: str) -> list[str]:
        return [p["metadata"]["name"] for p in kube.list("Pod", namespace, label_selector=selector)]

    metrics = [settings.AUTOSCALING_GPU_UTIL_METRIC, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    rates = PodRates(
        lambda namespace, selector: kube.list("Pod", namespace, label_selector=selector),
        {settings.AUTOSCALING_REQUEST_RATE_METRIC: "requests_total"},
    )
    adapter = MetricsAdapter(prometheus.url, metrics, pods, rates=rates)
    adapter.start()
    objects = adapter.registration()
    for obj in objects:
        kube.apply(obj)
    env_file.write_text(f"PROMETHEUS_URL={prometheus.url}\n")
    print(f"demo metrics: Prometheus {prometheus.url}, custom metrics API registered", flush=True)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    for obj in reversed(objects):
        kube.delete(obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))
    env_file.unlink(missing_ok=True)
    adapter.stop()
    prometheus.stop()
    dcgm.stop()
    return 0
