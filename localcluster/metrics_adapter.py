"""The local cluster's custom metrics adapter: serves `custom.metrics.k8s.io/v1beta2` pod metrics
from Prometheus, as prometheus-adapter does on a real cluster, so that the real
HorizontalPodAutoscaler controller (kube-controller-manager) scales inference services here.

Why not prometheus-adapter itself: its module (`sigs.k8s.io/prometheus-adapter`) is not served
by the Go module proxy this project can reach (403 for every version), and an adapter built on
`sigs.k8s.io/custom-metrics-apiserver` needs the API server's front-proxy (requestheader)
certificates, which the local API server does not have. This adapter is the smallest honest
stand-in: the API server's aggregator, the APIService, the HPA controller, Prometheus and its
scrape are all real; only the piece that turns a Prometheus query into a `MetricValueList` is
ours. It answers prometheus-adapter's default rule for a per-pod series:

    avg by (pod) (<metric>{namespace="<ns>", pod=~"<pods the selector picks>"})

and, given `rates` (`pod_rates.py`), request rates per pod from a counter the pods serve on
their own `/metrics` (the inference stand-in's `requests_total` as `requests_per_second`),
scraped from the pods where prometheus-adapter would ask Prometheus for
`sum by (pod) (rate(requests_total{...}[window]))`.

Wiring: an `APIService` for `v1beta2.custom.metrics.k8s.io` whose Service is of type
ExternalName `127.0.0.1` (the aggregator dials an ExternalName's host directly, with no
kube-proxy), served over TLS with a certificate the APIService's caBundle trusts. It binds to
127.0.0.1 and does not authenticate its callers: the local cluster's aggregator sends no
front-proxy client certificate. Not for anything but the local cluster.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import tempfile
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlencode, urlsplit
from urllib.request import urlopen

from .base import openssl
from .pod_rates import PodRates

GROUP = "custom.metrics.k8s.io"
VERSION = "v1beta2"
NAMESPACE = "kube-system"
SERVICE = "gpu-portal-metrics-adapter"
HOST = "127.0.0.1"
_METRIC_PATH = re.compile(
    rf"^/apis/{re.escape(GROUP)}/{VERSION}/namespaces/(?P<ns>[^/]+)/pods/(?P<pod>[^/]+)/"
    r"(?P<metric>[A-Za-z_:][A-Za-z0-9_:]*)$"
)

PodLister = Callable[[str, str], list[str]]  # (namespace, label selector) -> pod names


def quantity(value: float) -> str:
    """A Kubernetes quantity for a metric value, in thousandths where it is not whole."""
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")  # what a pod or namespace name is


def promql(metric: str, namespace: str, pods: list[str]) -> str:
    """prometheus-adapter's default query for a per-pod series. Names are DNS names (nothing
    to escape: a PromQL string would refuse a regexp escape such as `\\-`)."""
    if not _NAME.match(namespace) or not all(_NAME.match(p) for p in pods):
        raise ValueError(f"not a DNS name among {namespace!r}, {pods!r}")
    names = "|".join(pods)
    return f'avg by (pod) ({metric}{{namespace="{namespace}",pod=~"{names}"}})'


def metric_value_list(metric: str, namespace: str, values: dict[str, float], at: datetime) -> dict:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "kind": "MetricValueList",
        "apiVersion": f"{GROUP}/{VERSION}",
        "metadata": {},
        "items": [
            {
                "describedObject": {
                    "kind": "Pod",
                    "namespace": namespace,
                    "name": pod,
                    "apiVersion": "/v1",
                },
                "metric": {"name": metric},
                "timestamp": stamp,
                "value": quantity(value),
            }
            for pod, value in sorted(values.items())
        ],
    }


def resource_list(metrics: list[str]) -> dict:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{GROUP}/{VERSION}",
        "resources": [
            {
                "name": f"pods/{m}",
                "singularName": "",
                "namespaced": True,
                "kind": "MetricValueList",
                "verbs": ["get"],
            }
            for m in metrics
        ],
    }


def _status(code: int, message: str) -> dict:
    reason = {404: "NotFound", 400: "BadRequest"}.get(code, "InternalError")
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class MetricsAdapter:
    """Serve `metrics` (per-pod Prometheus series) on the custom metrics API, and the request
    rates `rates` serves (scraped from the pods themselves, no Prometheus needed for them)."""

    def __init__(
        self,
        prometheus_url: str,
        metrics: list[str],
        list_pods: PodLister,
        rates: PodRates | None = None,
    ):
        self.prometheus_url = prometheus_url.rstrip("/")
        self.rates = rates
        self.metrics = list(metrics) + (list(rates.counters) if rates is not None else [])
        self.list_pods = list_pods
        self.requests = 0
        self.last_error = ""
        self.port = 0
        self._dir = Path(tempfile.mkdtemp(prefix="metrics-adapter-"))
        self._server: ThreadingHTTPServer | None = None

    def query(self, metric: str, namespace: str, pods: list[str]) -> dict[str, float]:
        if not pods:
            return {}
        url = f"{self.prometheus_url}/api/v1/query?" + urlencode(
            {"query": promql(metric, namespace, pods)}
        )
        with urlopen(url, timeout=5) as answer:  # noqa: S310 (our own Prometheus on loopback)
            body = json.load(answer)
        out = {}
        for row in (body.get("data") or {}).get("result") or []:
            out[row["metric"].get("pod", "")] = float(row["value"][1])
        return out

    def answer(self, path: str, query: str) -> tuple[int, dict]:
        """(status, body) for a GET (pure but for the Prometheus query and the pod list)."""
        if path.rstrip("/") == f"/apis/{GROUP}/{VERSION}":
            return 200, resource_list(self.metrics)
        match = _METRIC_PATH.match(path)
        if match is None:
            return 404, _status(404, f"{path} is not served here")
        ns, pod, metric = match["ns"], match["pod"], match["metric"]
        if metric not in self.metrics:
            return 404, _status(404, f"the custom metric {metric} is not served")
        selector = (parse_qs(query).get("labelSelector") or [""])[0] if pod == "*" else ""
        if self.rates is not None and metric in self.rates.counters:
            values = self.rates.rates(metric, ns, selector, None if pod == "*" else pod)
        else:
            values = self.query(metric, ns, self.list_pods(ns, selector) if pod == "*" else [pod])
        if pod != "*" and not values:
            return 404, _status(404, f"no {metric} for pod {ns}/{pod}")
        return 200, metric_value_list(metric, ns, values, datetime.now(UTC))

    def _certificate(self) -> tuple[Path, Path]:
        cert, key = self._dir / "tls.crt", self._dir / "tls.key"
        openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=gpu-portal-metrics-adapter",
            # the aggregator checks the Service's DNS name, whatever address it dials
            "-addext", f"subjectAltName=DNS:{SERVICE}.{NAMESPACE}.svc,IP:{HOST}",
            "-keyout", str(key), "-out", str(cert),
        )  # fmt: skip
        return cert, key

    def start(self) -> int:
        cert, key = self._certificate()
        adapter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                adapter.requests += 1
                parts = urlsplit(self.path)
                try:
                    code, body = adapter.answer(unquote(parts.path), parts.query)
                except Exception as exc:  # noqa: BLE001 (said to the caller, kept for tests)
                    adapter.last_error = repr(exc)
                    code, body = 500, _status(500, str(exc))
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def ca_bundle(self) -> str:
        return base64.b64encode((self._dir / "tls.crt").read_bytes()).decode()

    def registration(self) -> list[dict]:
        """The Service and APIService that put this adapter behind the API server's
        aggregator (apply them once it listens; delete them when it stops, or discovery of
        the whole cluster reports the group unavailable)."""
        return registration(self.port, self.ca_bundle())


def registration(port: int, ca_bundle: str) -> list[dict]:
    labels = {"app.kubernetes.io/name": SERVICE}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE, "labels": labels},
            "spec": {"type": "ExternalName", "externalName": HOST},
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{VERSION}.{GROUP}", "labels": labels},
            "spec": {
                "group": GROUP,
                "version": VERSION,
                "service": {"namespace": NAMESPACE, "name": SERVICE, "port": port},
                "caBundle": ca_bundle,
                "groupPriorityMinimum": 100,
                "versionPriority": 200,
            },
        },
    ]
