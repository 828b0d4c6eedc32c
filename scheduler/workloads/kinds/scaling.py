"""An autoscaled deployment's scaling as its page shows it: replicas now and wanted, each metric's
target and current value, the autoscaler's conditions and its scale events, read from its
HorizontalPodAutoscaler through the one door. `scaling_view` is pure."""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ClusterError, ServiceError
from scheduler.cluster.kube import KubeGateway, gateway
from scheduler.workloads.models import Workload
from tenants.permissions import READ_ROLES, require_role

# The autoscaler's events worth a person's eye (kube-controller-manager's reasons).
SCALE_EVENT_REASONS = frozenset(
    {"SuccessfulRescale", "FailedGetPodsMetric", "FailedComputeMetricsReplicas", "FailedRescale"}
)


class ScalingUnavailable(ServiceError):
    code = "scaling_unavailable"
    status = 409


@dataclass(frozen=True)
class MetricRow:
    name: str
    target: str  # "" where the autoscaler does not say
    current: str  # "" until the metrics API has answered


@dataclass(frozen=True)
class ConditionRow:
    kind: str
    ok: bool
    reason: str
    message: str


@dataclass(frozen=True)
class EventRow:
    at: str
    reason: str
    message: str
    count: int


@dataclass(frozen=True)
class ScalingView:
    current: int | None
    desired: int | None
    min_replicas: int | None
    max_replicas: int | None
    last_scaled: str
    metrics: list[MetricRow]
    conditions: list[ConditionRow]
    events: list[EventRow]
    said: str = ""  # what the conditions mean, in words, where the raw ones do not tell


# The HPA controller's words when the cluster serves no custom metrics API for its metric.
_NO_METRICS_API = ("no custom metrics api", "unable to get metric", "failedgetpodsmetric")


def _in_words(conditions: list[ConditionRow], metrics: list[MetricRow], current) -> str:
    """The autoscaler cannot read its metric because no metrics API serves it: said as such
    (the raw condition stays beside it)."""
    raw = " ".join(f"{c.reason} {c.message}" for c in conditions if not c.ok).lower()
    if not any(words in raw for words in _NO_METRICS_API):
        return ""
    names = ", ".join(m.name for m in metrics) or "its metric"
    keeps = f"{current} replica{'s' if current != 1 else ''}" if current is not None else "its size"
    return (
        f"The autoscaler cannot read {names}: the cluster serves no custom metrics API for it "
        "(a metrics adapter such as prometheus-adapter is not installed or not ready). It keeps "
        f"{keeps} until it can; the platform team installs the adapter."
    )


def _metric_value(block: dict | None) -> str:
    for key in ("averageValue", "value", "averageUtilization"):
        if (value := (block or {}).get(key)) is not None:
            return str(value)
    return ""


def scaling_view(hpa: dict, events: list[dict]) -> ScalingView:
    """What the page shows of an HPA and the events about it, newest event first (pure)."""
    spec, status = hpa.get("spec") or {}, hpa.get("status") or {}
    current = {}
    for m in status.get("currentMetrics") or []:
        body = m.get(m.get("type", "").lower() or "pods") or {}
        current[(body.get("metric") or {}).get("name", "")] = _metric_value(body.get("current"))
    metrics = []
    for m in spec.get("metrics") or []:
        body = m.get(m.get("type", "").lower() or "pods") or {}
        name = (body.get("metric") or {}).get("name", "")
        metrics.append(MetricRow(name, _metric_value(body.get("target")), current.get(name, "")))
    conditions = [
        ConditionRow(
            c.get("type", ""), c.get("status") == "True", c.get("reason", ""), c.get("message", "")
        )
        for c in status.get("conditions") or []
    ]
    name = (hpa.get("metadata") or {}).get("name")
    mine = [
        e
        for e in events
        if (e.get("involvedObject") or {}).get("kind") == "HorizontalPodAutoscaler"
        and (e.get("involvedObject") or {}).get("name") == name
        and e.get("reason") in SCALE_EVENT_REASONS
    ]

    def when(e: dict) -> str:
        return e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or ""

    rows = [
        EventRow(when(e), e.get("reason", ""), e.get("message", ""), int(e.get("count") or 1))
        for e in sorted(mine, key=when, reverse=True)
    ]
    return ScalingView(
        current=status.get("currentReplicas"),
        desired=status.get("desiredReplicas"),
        min_replicas=spec.get("minReplicas"),
        max_replicas=spec.get("maxReplicas"),
        last_scaled=status.get("lastScaleTime") or "",
        metrics=metrics,
        conditions=conditions,
        events=rows[:20],
        said=_in_words(conditions, metrics, status.get("currentReplicas")),
    )


def workload_scaling(kube: KubeGateway | None = None, *, actor, workload: Workload) -> ScalingView:
    """The autoscaler of an autoscaled deployment as the cluster has it; 409 with the reason
    where it cannot say (fixed size, not created yet, the API server down), never a 500."""
    require_role(actor, workload.tenant, READ_ROLES, "see scaling")
    if workload.max_replicas is None:
        raise ScalingUnavailable(f"workload {workload.name} has a fixed number of replicas")
    if workload.cluster_created_at is None:
        raise ScalingUnavailable(f"workload {workload.name} is not on the cluster yet")
    kube = kube or gateway()
    try:
        hpa = kube.get("HorizontalPodAutoscaler", workload.k8s_name, workload.namespace)
        if hpa is None:
            raise ScalingUnavailable(f"workload {workload.name} has no autoscaler on the cluster")
        events = kube.list(
            "Event",
            workload.namespace,
            field_selector="involvedObject.kind=HorizontalPodAutoscaler,"
            f"involvedObject.name={workload.k8s_name}",
        )
    except ClusterError as exc:
        raise ScalingUnavailable(f"cannot read the autoscaler of {workload.name}: {exc}") from exc
    return scaling_view(hpa, events)
