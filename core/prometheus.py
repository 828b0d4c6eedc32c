"""Prometheus' HTTP query API, for whoever reads DCGM's series (metering, GPU health)."""

from __future__ import annotations

import requests


class PrometheusUnavailable(ConnectionError):
    """Prometheus did not answer or answered an error (transient for tasks)."""


def instant_query(base_url: str, query: str, timeout: float) -> list[dict]:
    """The result vector of an instant query: [{"metric": {...}, "value": [ts, "v"]}, ...]."""
    try:
        response = requests.get(
            base_url.rstrip("/") + "/api/v1/query", params={"query": query}, timeout=timeout
        )
        response.raise_for_status()
        body = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise PrometheusUnavailable(f"Prometheus at {base_url}: {exc}") from exc
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error", body) if isinstance(body, dict) else body
        raise PrometheusUnavailable(f"Prometheus at {base_url}: {error}")
    try:
        return list(body["data"]["result"])
    except (KeyError, TypeError) as exc:
        raise PrometheusUnavailable(f"Prometheus at {base_url}: no result vector") from exc
