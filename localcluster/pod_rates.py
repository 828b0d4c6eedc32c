"""Request rates for the local cluster's custom metrics adapter (`metrics_adapter.py`): the
pods' own `/metrics` pages are scraped for a counter (the inference stand-in's
`requests_total`) and each pod's counter becomes a per-second rate over a sliding window, as
prometheus-adapter serves `rate(requests_total[window])` from Prometheus on a real cluster.

Scraped when the HPA asks (every sync period), not on a timer of our own: the window then holds
the samples of the last few asks. A pod seen for the first time (or after a pause longer than
the window) has one sample only, so it is scraped once more after `settle_s`: its first answer
is a rate over that second rather than no value at all.

Reaching the pods: the adapter runs on the host, where the real node's pod network
(`gpuportal0`) is routed. kube-network-policies accepts what root's processes on the node send
(`meta skuid 0 accept`, its answer to kubelet probes), so a team's NetworkPolicy does not
refuse the scrape, as it does not refuse the kubelet's probes.

`scrape_targets`, `counter_value` and `CounterWindow` are pure.
"""

from __future__ import annotations

import http.client
import math
import re
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.request import urlopen

METRICS_PORT_NAME = "metrics"  # a container port of this name is scraped; else the first port
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")

PodLister = Callable[[str, str], list[dict]]  # (namespace, label selector) -> the API's pods
Fetch = Callable[[str], str]  # a URL -> the page


@dataclass(frozen=True)
class Target:
    pod: str
    url: str


def scrape_targets(pods: list[dict], path: str = "/metrics") -> list[Target]:
    """Where each running pod serves its metrics: its address, at the container port named
    `metrics`, else the first port its containers declare. A pod that is not running, has no
    address yet, is being deleted or declares no port is left out (the HPA ignores the first
    three too)."""
    out = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        address = status.get("podIP")
        if meta.get("deletionTimestamp") or status.get("phase") != "Running" or not address:
            continue
        ports = [
            p
            for c in (pod.get("spec") or {}).get("containers") or []
            for p in c.get("ports") or []
            if p.get("protocol", "TCP") == "TCP"
        ]
        if not ports:
            continue
        port = next((p for p in ports if p.get("name") == METRICS_PORT_NAME), ports[0])
        host = f"[{address}]" if ":" in address else address
        out.append(Target(meta["name"], f"http://{host}:{port['containerPort']}{path}"))
    return out


def counter_value(page: str, name: str) -> float | None:
    """A counter's value on a page in Prometheus' text format: the sum of its samples over
    every label set; None where the page has no sample of it."""
    total, seen = 0.0, False
    for line in page.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None or match["name"] != name:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        if math.isfinite(value):
            total, seen = total + value, True
    return total if seen else None


class CounterWindow:
    """Samples of counters over the last `window_s` seconds, by key. A key's rate is the
    counter's increase over its samples divided by the time they span; a counter that went
    down was restarted from 0 (a container restart), so its new value is the increase, as
    Prometheus' rate() reads a reset. No extrapolation to the window's edges."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self._samples: dict[Hashable, list[tuple[float, float]]] = {}

    def add(self, key: Hashable, at: float, value: float) -> None:
        kept = [s for s in self._samples.get(key, []) if s[0] >= at - self.window_s]
        self._samples[key] = [*kept, (at, value)]

    def count(self, key: Hashable) -> int:
        return len(self._samples.get(key, []))

    def rate(self, key: Hashable) -> float | None:
        samples = self._samples.get(key, [])
        if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
            return None
        increase = 0.0
        for (_, before), (_, after) in zip(samples, samples[1:], strict=False):
            increase += after - before if after >= before else after
        return increase / (samples[-1][0] - samples[0][0])

    def forget_before(self, at: float) -> None:
        """Drop the keys last sampled before `at` (pods long gone)."""
        for key in [k for k, s in self._samples.items() if s[-1][0] < at]:
            del self._samples[key]


def fetch_page(url: str) -> str:
    with urlopen(url, timeout=2) as answer:  # noqa: S310 (a pod's address, http)
        return answer.read().decode(errors="replace")


class PodRates:
    """Serve `counters` ({metric served: counter on the pods' pages}) as per-second rates per
    pod, scraped when asked."""

    def __init__(
        self,
        list_pods: PodLister,
        counters: dict[str, str],
        *,
        window_s: float = 30.0,
        settle_s: float = 1.0,
        fetch: Fetch = fetch_page,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.list_pods = list_pods
        self.counters = dict(counters)
        self.window = CounterWindow(window_s)
        self.settle_s = settle_s
        self.fetch, self.clock, self.sleep = fetch, clock, sleep
        self.last: dict[tuple[str, str], float] = {}  # (namespace, pod) -> the rate last served
        self.last_error = ""
        self._lock = threading.Lock()  # the HPA controller's workers ask at once

    def _page(self, target: Target) -> tuple[float, str | None]:
        try:
            page = self.fetch(target.url)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            self.last_error = f"{target.url}: {exc!r}"
            page = None
        return self.clock(), page

    def _scrape(self, namespace: str, counter: str, targets: list[Target]) -> None:
        with ThreadPoolExecutor(max_workers=min(8, len(targets))) as pool:
            pages = list(pool.map(self._page, targets))
        for target, (at, page) in zip(targets, pages, strict=True):
            value = None if page is None else counter_value(page, counter)
            if value is not None:
                self.window.add((namespace, target.pod, counter), at, value)

    def rates(
        self, metric: str, namespace: str, selector: str, pod: str | None = None
    ) -> dict[str, float]:
        """Pod -> requests per second of the pods `selector` picks (or the one pod named);
        a pod whose page could not be read twice within the window has no value."""
        counter = self.counters[metric]
        with self._lock:
            targets = scrape_targets(self.list_pods(namespace, selector))
            if pod is not None:
                targets = [t for t in targets if t.pod == pod]
            if not targets:
                return {}
            self._scrape(namespace, counter, targets)
            fresh = [t for t in targets if self.window.count((namespace, t.pod, counter)) < 2]
            if fresh:
                self.sleep(self.settle_s)
                self._scrape(namespace, counter, fresh)
            out = {}
            for target in targets:
                rate = self.window.rate((namespace, target.pod, counter))
                if rate is not None:
                    out[target.pod] = rate
            self.last.update({(namespace, name): value for name, value in out.items()})
            self.window.forget_before(self.clock() - 10 * self.window.window_s)
            return out
