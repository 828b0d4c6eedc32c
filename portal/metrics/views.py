"""/metrics: what the web processes counted and the portal's state, for the monitoring system
only (a bearer token or an allowed address)."""

from __future__ import annotations

import hmac
import ipaddress
from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from portal.metrics.collector import PortalStateCollector
from portal.metrics.registry import process_registry


class _Exposition:
    """Several collectors as one, for generate_latest."""

    def __init__(self, *collectors: Collector):
        self.collectors = collectors

    def collect(self):
        for collector in self.collectors:
            yield from collector.collect()


@lru_cache(maxsize=8)
def _networks(cidrs: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    try:
        return tuple(ipaddress.ip_network(cidr.strip(), strict=False) for cidr in cidrs)
    except ValueError as exc:
        raise ImproperlyConfigured(f"METRICS_ALLOWED_CIDRS: {exc}") from exc


def metrics_access_allowed(request: HttpRequest) -> bool:
    """/metrics answers the monitoring system only: a request bearing METRICS_TOKEN (when set),
    or one from an address in METRICS_ALLOWED_CIDRS that came through no proxy (a request
    through the ingress carries X-Forwarded-For, whoever sent it)."""
    token = settings.METRICS_TOKEN
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        # As bytes: compare_digest raises TypeError on a non-ASCII str (`Bearer café`, a 500).
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass")
        ):
            return True
    if "X-Forwarded-For" in request.headers:
        return False
    try:
        peer = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped:
        peer = peer.ipv4_mapped
    return any(peer in net for net in _networks(tuple(settings.METRICS_ALLOWED_CIDRS)))


@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus's text format: what the web processes counted, and the portal's state."""
    if not metrics_access_allowed(request):
        return HttpResponse(
            "metrics are for the monitoring system: a bearer token or an allowed address\n",
            status=403,
            content_type="text/plain",
        )
    body = generate_latest(_Exposition(process_registry(), PortalStateCollector()))
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
