"""Per-pod GPU utilisation from Prometheus scraping NVIDIA's dcgm-exporter.

Whole GPUs report `DCGM_FI_DEV_GPU_UTIL` (percent); MIG instances do not, and report
`DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0-1) instead; framebuffer use is `DCGM_FI_DEV_FB_USED` (MiB).
Series carry the pod's namespace and name as labels (the exporter's Kubernetes pod mapping):
`namespace` and `pod`, or `exported_namespace` and `exported_pod` where a ServiceMonitor without
`honorLabels` renamed them; settings DCGM_NAMESPACE_LABEL and DCGM_POD_LABEL say which.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

from core.prometheus import PrometheusUnavailable, instant_query

__all__ = ["PodUse", "PrometheusUnavailable", "pod_utilisation", "queries"]

WHOLE_QUERY = "avg by ({by}) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[{w}])) / 100"
MIG_QUERY = "avg by ({by}) (avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[{w}]))"
FB_QUERY = "sum by ({by}) (max_over_time(DCGM_FI_DEV_FB_USED[{w}]))"


def _labels() -> tuple[str, str]:
    return settings.DCGM_NAMESPACE_LABEL, settings.DCGM_POD_LABEL


def queries(window: str) -> dict[str, str]:
    """The three queries, grouped by the configured namespace and pod labels."""
    by = ", ".join(_labels())
    return {
        "mig": MIG_QUERY.format(by=by, w=window),
        "whole": WHOLE_QUERY.format(by=by, w=window),
        "fb": FB_QUERY.format(by=by, w=window),
    }


def pod_key(row: dict) -> tuple[str, str]:
    """(namespace, pod) of a result row, by the configured label names."""
    metric = row.get("metric", {})
    namespace, pod = _labels()
    return metric.get(namespace, ""), metric.get(pod, "")


@dataclass(frozen=True)
class PodUse:
    util: Decimal  # 0-1
    fb_used_mib: int | None


def _query(base_url: str, query: str, timeout: float) -> list[dict]:
    return instant_query(base_url, query, timeout)


def _clamp(value: str) -> Decimal | None:
    try:
        number = Decimal(value)
    except ArithmeticError:
        return None
    if not number.is_finite():
        return None
    return min(max(number, Decimal(0)), Decimal(1)).quantize(Decimal("0.000001"))


def pod_utilisation(
    base_url: str, *, window: str = "2m", timeout: float = 10.0
) -> dict[tuple[str, str], PodUse]:
    """(namespace, pod) -> mean utilisation over `window` (MIG instances' engine activity where a
    pod has no whole-GPU series) and framebuffer used."""
    util: dict[tuple[str, str], Decimal] = {}
    q = queries(window)
    for name in ("mig", "whole"):  # whole-GPU figures win where a pod has both
        for row in _query(base_url, q[name], timeout):
            key = pod_key(row)
            value = _clamp(row["value"][1])
            if key[1] and value is not None:
                util[key] = value
    fb: dict[tuple[str, str], int] = {}
    for row in _query(base_url, q["fb"], timeout):
        try:
            fb[pod_key(row)] = int(float(row["value"][1]))
        except (TypeError, ValueError):
            continue
    return {key: PodUse(util=value, fb_used_mib=fb.get(key)) for key, value in util.items()}
