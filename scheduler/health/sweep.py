"""The periodic GPU health check: read DCGM's signals through Prometheus (and the GPUs a node's
allocatable lacks), open and close events by the policy (`events.py`), record each node's
state, then bring taints and drains in line (`taints.py`).

Prometheus unreachable changes nothing: nodes read "health unknown", no taint is added or removed.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from catalog.product_labels import configured_product_labels
from core.prometheus import PrometheusUnavailable, instant_query
from scheduler.cluster import node_offers
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster
from scheduler.health import policy
from scheduler.health.events import apply_steps
from scheduler.health.models import HealthEvent, HealthRule, NodeHealth
from scheduler.health.pods import gpu_pods, tenants_by_namespace
from scheduler.health.results import HealthCheck
from scheduler.health.rules import ensure_default_rules
from scheduler.health.taints import enforce

log = logging.getLogger(__name__)


def queries(window: str | None = None) -> dict[str, str]:
    """One PromQL query per DCGM signal, grouped by node, GPU index and UUID (label names and
    metric names are settings)."""
    w = window or settings.GPU_HEALTH_WINDOW
    m = settings.GPU_HEALTH_METRICS
    by = ", ".join((settings.DCGM_NODE_LABEL, settings.DCGM_GPU_LABEL, settings.DCGM_UUID_LABEL))
    return {
        "xid": f"max by ({by}) ({m['xid']})",
        "gpu_temp": f"max by ({by}) ({m['gpu_temp']})",
        "memory_temp": f"max by ({by}) ({m['memory_temp']})",
        "ecc_uncorrectable": f"max by ({by}) (increase({m['ecc_uncorrectable']}[{w}]))",
        "row_remap_failure": f"max by ({by}) ({m['row_remap_failure']})",
        # DCGM counts microseconds of throttling: the rate is microseconds per second.
        "power_throttle": f"max by ({by}) (rate({m['power_throttle']}[{w}])) / 1000000",
        "nvlink_errors": f"max by ({by}) (increase({m['nvlink_errors']}[{w}]))",
    }


def read_signals(base_url: str, *, timeout: float = 10.0) -> list[policy.Reading]:
    """Every GPU's readings; raises PrometheusUnavailable when any query fails (a partial read
    would look like signals clearing)."""
    readings = []
    for signal, query in queries().items():
        for row in instant_query(base_url, query, timeout):
            metric = row.get("metric") or {}
            node = metric.get(settings.DCGM_NODE_LABEL, "")
            gpu = metric.get(settings.DCGM_GPU_LABEL, "")
            value = policy.parse_value((row.get("value") or [None, None])[1])
            if not node or gpu == "" or value is None:
                continue
            readings.append(
                policy.Reading(
                    node, str(gpu), metric.get(settings.DCGM_UUID_LABEL, ""), signal, value
                )
            )
    return readings


def node_readings(gpu_nodes: list[node_offers.NodeInfo]) -> list[policy.Reading]:
    """What the API server says: GPUs a node's labels count but its allocatable lacks."""
    out = []
    for info in gpu_nodes:
        missing = policy.missing_gpus(info.labels, info.allocatable)
        if missing is not None:
            out.append(policy.Reading(info.name, "", "", "gpu_missing", Decimal(missing)))
    return out


def check_health(
    kube: KubeGateway,
    *,
    prometheus_url: str | None = None,
    now: datetime | None = None,
    cluster_name: str = "local",
) -> HealthCheck:
    """One ingest: read, open and close events, then bring taints and drains in line."""
    now = now or timezone.now()
    url = settings.PROMETHEUS_URL if prometheus_url is None else prometheus_url
    result = HealthCheck()
    ensure_default_rules()
    cluster, _ = Cluster.objects.get_or_create(name=cluster_name)
    labels_by_model = configured_product_labels()
    nodes = kube.list("Node")  # read once: the readings and the taints both work from it
    gpu_nodes = [
        info
        for info in (node_offers.parse_node(n, labels_by_model) for n in nodes)
        if info.gpu_model
    ]
    node_names = {info.name for info in gpu_nodes}
    if not url:
        # Health checks are off, not failing: no node is marked (the page says why).
        result.unknown = "no Prometheus configured (PROMETHEUS_URL)"
        return result
    try:
        readings = read_signals(url) + node_readings(gpu_nodes)
    except PrometheusUnavailable as exc:
        result.unknown = f"Prometheus unreachable: {exc}"[:400]
        log.warning("GPU health unknown, nothing changed: %s", exc)
        _mark_unknown(cluster, node_names, result.unknown, now)
        return result
    rules = {r.pk: r.as_rule() for r in HealthRule.objects.filter(enabled=True)}
    known = defaultdict(set)
    for node, gpu in (
        HealthEvent.objects.filter(cluster=cluster)
        .filter_open_or_latched()
        .values_list("node_name", "gpu")
    ):
        known[node].add(gpu)
    found = policy.evaluate(readings, list(rules.values()), known)
    # Pods of nodes that may turn sick now, read before the transaction (no lock waits on the
    # API server).
    firing_nodes = {
        node
        for (node, _, rule_id), st in found.statuses.items()
        if st is policy.Status.FIRING and rules[rule_id].action != "warn"
    }
    pods_by_node = {node: gpu_pods(kube, node) for node in sorted(firing_nodes)}
    tenants_by_ns = tenants_by_namespace(kube) if firing_nodes else {}
    with transaction.atomic():
        Cluster.objects.select_for_update().get(pk=cluster.pk)  # one check at a time
        apply_steps(cluster, found, rules, pods_by_node, tenants_by_ns, now, result)
        _record_node_states(cluster, node_names, found, now)
    enforce(kube, cluster, result, now=now, nodes=nodes)
    return result


def _record_node_states(cluster, node_names, found, now) -> None:
    open_by_node = defaultdict(set)
    for node, action in (
        HealthEvent.objects.filter(cluster=cluster).open().values_list("node_name", "action")
    ):
        open_by_node[node].add(action)
    for name in node_names | set(open_by_node):
        actions = open_by_node.get(name, set())
        read = name in found.nodes_read
        if actions & {"taint", "drain"}:
            state, message = NodeHealth.State.SICK, "tainted until a platform admin acknowledges"
        elif actions:
            state, message = NodeHealth.State.WARNING, "warnings open"
        elif read:
            state, message = NodeHealth.State.HEALTHY, ""
        else:
            state, message = NodeHealth.State.UNKNOWN, "no DCGM series for this node"
        NodeHealth.objects.update_or_create(
            cluster=cluster,
            node_name=name,
            defaults={"state": state, "message": message, "checked_at": now},
        )


def _mark_unknown(cluster, node_names, why: str, now) -> None:
    """Health unknown: say so, keep every taint and event as it is."""
    for name in node_names | set(
        NodeHealth.objects.filter(cluster=cluster).values_list("node_name", flat=True)
    ):
        NodeHealth.objects.update_or_create(
            cluster=cluster,
            node_name=name,
            defaults={"state": NodeHealth.State.UNKNOWN, "message": why[:500]},
        )
