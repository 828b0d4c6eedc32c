"""Where the culling pass reads a workspace's signals, as interfaces: the server's last kernel
or terminal activity, and the GPU use of the run's pods. The real readers ask the server over
HTTP inside the cluster and DCGM through Prometheus; a KWOK pod runs no process, so the local
cluster's tests hand the pass readers of their own (docs/workspaces.md)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime
from decimal import Decimal
from typing import Protocol

from django.conf import settings
from django.utils.dateparse import parse_datetime

from metering import prometheus
from metering.idle_runs import workload_use
from workspaces import server_secret
from workspaces.manifests import status_url
from workspaces.models import Workspace


class ActivityReader(Protocol):
    def last_activity(self, workspace: Workspace) -> datetime | None:
        """The server's last kernel or terminal activity; None when it does not answer."""


class GpuUseReader(Protocol):
    def gpu_use(self, workspace: Workspace, pods: list[dict]) -> Decimal | None:
        """The run's GPU use over the window (0-1); None when there is no data."""


def parse_activity(kind: str, body: dict) -> datetime | None:
    """Jupyter's /api/status `last_activity` (ISO time), code-server's /healthz
    `lastHeartbeat` (ms since the epoch) (pure)."""
    if kind == Workspace.Kind.CODE_SERVER:
        beat = body.get("lastHeartbeat")
        if isinstance(beat, int | float) and beat > 0:
            return datetime.fromtimestamp(beat / 1000, tz=UTC)
        return None
    value = body.get("last_activity")
    try:
        return parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        return None


class HttpActivityReader:
    """Asks the server itself through its Service (the portal runs in the cluster)."""

    def __init__(self, timeout: float = 5.0):
        self.timeout = timeout

    def last_activity(self, workspace: Workspace) -> datetime | None:
        url = status_url(workspace.kind, workspace.tenant.namespace, workspace.name)
        request = urllib.request.Request(url)  # noqa: S310 - the cluster's own http
        secret = server_secret.unseal(workspace.server_secret_sealed)
        if secret is not None:  # Jupyter's /api/status asks for its token
            headers = server_secret.upstream_credentials(workspace.kind, secret)["headers"]
            for name, value in headers.items():
                request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                body = json.loads(response.read(65536))
        except (urllib.error.URLError, OSError, ValueError):
            return None
        return parse_activity(workspace.kind, body) if isinstance(body, dict) else None


class PrometheusGpuUse:
    """DCGM's use of the run's pods, read once per pass (metering.prometheus)."""

    def __init__(self) -> None:
        self._use: dict | None = None

    def gpu_use(self, workspace: Workspace, pods: list[dict]) -> Decimal | None:
        if not settings.PROMETHEUS_URL:
            return None
        if self._use is None:
            try:
                self._use = prometheus.pod_utilisation(
                    settings.PROMETHEUS_URL, window=settings.IDLE_USE_WINDOW
                )
            except prometheus.PrometheusUnavailable:
                self._use = {}
        return workload_use(pods, self._use)
