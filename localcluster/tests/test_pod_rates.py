"""The local metrics adapter's request rates (pure): where a pod's metrics are scraped, a
counter read from Prometheus' text format, the per-second arithmetic over a sliding window
(resets included), and the adapter answering `requests_per_second` as the HPA asks for it;
then the inference stand-in's own `/metrics`, served by `serve.py` and read as the adapter
reads it."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localcluster import pod_rates
from localcluster.metrics_adapter import MetricsAdapter
from localcluster.pod_rates import CounterWindow, PodRates, counter_value, scrape_targets

SERVE = Path(__file__).resolve().parents[1] / "images" / "demo_work" / "serve.py"
BASE = "/apis/custom.metrics.k8s.io/v1beta2"
SELECTOR = "labelSelector=gpu-portal.io%2Fworkload%3D3"


def pod(name, ip="10.245.0.7", phase="Running", ports=({"name": "http", "containerPort": 8080},),
        deleting=False):  # fmt: skip
    meta = {"name": name, **({"deletionTimestamp": "2026-12-06T10:00:00Z"} if deleting else {})}
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "ports": list(ports)}]},
        "status": {"phase": phase, **({"podIP": ip} if ip else {})},
    }


def test_a_running_pod_is_scraped_at_its_metrics_port_else_its_first():
    pods = [
        pod("a"),
        pod("b", ip="10.245.0.8",
            ports=({"containerPort": 8080}, {"name": "metrics", "containerPort": 9090})),
        pod("c", ip="fd00::5"),
        pod("starting", ip=None),
        pod("pending", phase="Pending"),
        pod("going", deleting=True),
        pod("portless", ports=()),
    ]  # fmt: skip
    assert scrape_targets(pods) == [
        pod_rates.Target("a", "http://10.245.0.7:8080/metrics"),
        pod_rates.Target("b", "http://10.245.0.8:9090/metrics"),
        pod_rates.Target("c", "http://[fd00::5]:8080/metrics"),
    ]


def test_a_counter_is_the_sum_of_its_samples_and_only_its_own():
    page = (
        "# HELP requests_total Requests answered.\n"
        "# TYPE requests_total counter\n"
        'requests_total{code="200"} 41\n'
        'requests_total{code="500"} 1 1733480000000\n'
        "requests_total_created 1733470000\n"
        "other_requests_total 99\n"
    )
    assert counter_value(page, "requests_total") == 42
    assert counter_value("requests_total 7\n", "requests_total") == 7  # serve.py's page
    assert counter_value("requests_total NaN\n", "requests_total") is None
    assert counter_value("requests_total oops\n", "requests_total") is None
    assert counter_value("", "requests_total") is None


def test_a_rate_is_the_increase_over_the_time_the_samples_span():
    window = CounterWindow(window_s=15)
    window.add("a", 100.0, 50)
    assert window.rate("a") is None  # one sample says nothing of a rate
    window.add("a", 101.0, 60)
    assert window.rate("a") == 10.0
    window.add("a", 106.0, 110)
    window.add("a", 111.0, 160)
    assert window.rate("a") == (160 - 50) / 11
    # load stops: the counter stands still, and once the window has passed the busy samples
    # the rate is 0 (the HPA then scales down)
    window.add("a", 116.0, 160)
    assert window.rate("a") == pytest.approx((160 - 60) / 15)
    window.add("a", 121.0, 160)
    window.add("a", 126.0, 160)
    assert window.count("a") == 4  # 111 to 126: older ones left the window
    window.add("a", 131.0, 160)
    assert window.rate("a") == 0.0


def test_a_counter_that_went_down_restarted_from_zero():
    window = CounterWindow(window_s=30)
    for at, value in [(0.0, 1000), (5.0, 1050), (10.0, 20), (15.0, 70)]:
        window.add("a", at, value)
    # 50 before the restart, 20 since it restarted, 50 after: 120 in 15 s
    assert window.rate("a") == 8.0


def test_keys_long_unseen_are_forgotten():
    window = CounterWindow(window_s=10)
    window.add("gone", 0.0, 1)
    window.add("here", 50.0, 1)
    window.forget_before(40.0)
    assert (window.count("gone"), window.count("here")) == (0, 1)


class Clock:
    def __init__(self):
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def served():
    """An adapter serving requests_per_second from two pods whose counters advance with a
    fake clock (a: 12 requests/s, b: 3/s), and a third pod not yet running."""
    clock = Clock()
    per_s = {"http://10.245.0.7:8080/metrics": 12.0, "http://10.245.0.8:8080/metrics": 3.0}
    counted = dict.fromkeys(per_s, (clock.now, 500.0))  # url -> (when, requests_total)

    def fetch(url: str) -> str:
        if url not in counted:
            raise OSError("connection refused")
        at, count = counted[url]
        counted[url] = (clock.now, count + per_s[url] * (clock.now - at))
        return f"requests_total {counted[url][1]:.0f}\n"

    def pods(namespace, selector):
        assert (namespace, selector) in (("team-a", "gpu-portal.io/workload=3"), ("team-a", ""))
        return [pod("serve-a"), pod("serve-b", ip="10.245.0.8"), pod("serve-c", phase="Pending")]

    rates = PodRates(
        pods, {"requests_per_second": "requests_total"}, window_s=15, fetch=fetch,
        clock=clock, sleep=clock.sleep,
    )  # fmt: skip
    adapter = MetricsAdapter("", [], lambda ns, sel: [], rates=rates)
    return adapter, clock, per_s


def values(adapter, path=f"{BASE}/namespaces/team-a/pods/*/requests_per_second", query=SELECTOR):
    code, body = adapter.answer(path, query)
    assert code == 200, body
    return {i["describedObject"]["name"]: i["value"] for i in body["items"]}


def test_the_adapter_serves_each_pods_requests_per_second(served):
    adapter, clock, _ = served
    code, body = adapter.answer(BASE, "")
    assert [r["name"] for r in body["resources"]] == ["pods/requests_per_second"]
    # first ask: one sample each, so each pod is scraped again a second later
    assert values(adapter) == {"serve-a": "12", "serve-b": "3"}
    assert clock.slept == [1.0]
    # the HPA asks again a sync period later: no second scrape needed
    clock.now += 5
    assert values(adapter) == {"serve-a": "12", "serve-b": "3"}
    assert clock.slept == [1.0]
    assert adapter.rates.last[("team-a", "serve-a")] == 12.0
    # one pod by name, as the API also allows
    assert values(adapter, f"{BASE}/namespaces/team-a/pods/serve-b/requests_per_second", "") == {
        "serve-b": "3"
    }
    code, _ = adapter.answer(f"{BASE}/namespaces/team-a/pods/serve-c/requests_per_second", "")
    assert code == 404  # not running: nothing to read
    assert adapter.answer(f"{BASE}/namespaces/team-a/pods/*/requests_total", SELECTOR)[0] == 404


def test_when_the_load_stops_the_rate_falls_to_zero_within_the_window(served):
    adapter, clock, per_s = served
    values(adapter)
    for url in per_s:  # counters stand still from now on
        per_s[url] = 0.0
    clock.now += 5
    # the window now spans 6 s of which 1 was busy: a's 12 requests are 2 a second
    assert values(adapter) == {"serve-a": "2", "serve-b": "500m"}
    for _ in range(3):  # the HPA asks every 5 s; the window is 15 s
        clock.now += 5
        got = values(adapter)
    assert got == {"serve-a": "0", "serve-b": "0"}


def test_a_pod_that_does_not_answer_has_no_value_and_says_why():
    clock = Clock()

    def fetch(url):
        raise OSError("connection refused")

    rates = PodRates(lambda ns, sel: [pod("a")], {"rps": "requests_total"}, fetch=fetch,
                     clock=clock, sleep=clock.sleep)  # fmt: skip
    assert rates.rates("rps", "team-a", "x=y") == {}
    assert "10.245.0.7:8080" in rates.last_error and "connection refused" in rates.last_error


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_inference_stand_in_counts_what_it_answers_as_the_adapter_reads_it():
    """serve.py itself (the image's server): POSTs are counted, probes are not."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, str(SERVE)], env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                assert pod_rates.fetch_page(f"{base}/healthz") == "ok\n"
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()
                assert time.monotonic() < deadline, "serve.py did not answer in 30 s"
                time.sleep(0.1)
        page = pod_rates.fetch_page(f"{base}/metrics")
        assert counter_value(page, "requests_total") == 0  # the probe is not a request
        body = "[" + ",".join(["0.5"] * 16) + "]"
        for _ in range(5):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("POST", "/v1/predict", body=body)
            assert b"outputs" in connection.getresponse().read()
            connection.close()
        assert counter_value(pod_rates.fetch_page(f"{base}/metrics"), "requests_total") == 5
    finally:
        server.terminate()
        server.wait(timeout=10)
