"""Keeping the cluster in step with the open health events (level-triggered): a node with an
open taint or drain event carries the portal's NoSchedule taint, set through the cluster door,
and its drain runs (`drains.py`); a node without one carries no such taint of this portal."""

from __future__ import annotations

from collections import defaultdict

from django.conf import settings
from django.utils import timezone

from core import audit
from scheduler.cluster import inventory, node_offers
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster
from scheduler.health import policy
from scheduler.health.drains import drain
from scheduler.health.models import HealthEvent, NodeHealth
from scheduler.health.results import HealthCheck

TAINT_KEY = node_offers.HEALTH_TAINT_KEY
TAINT_EFFECT = "NoSchedule"


def _own_taint(node: dict) -> bool:
    return any(
        t.get("key") == TAINT_KEY and t.get("value") == settings.PORTAL_INSTANCE
        for t in (node.get("spec") or {}).get("taints") or []
    )


def enforce(
    kube: KubeGateway,
    cluster: Cluster,
    result: HealthCheck | None = None,
    *,
    now=None,
    nodes: list[dict] | None = None,
) -> HealthCheck:
    """Taints and drains in line with the open events (what a lost message or a `kubectl edit`
    left behind is repaired here). Pools are re-read when a taint changed. `nodes`: the nodes
    the caller has just listed (else they are listed here)."""
    result = result or HealthCheck()
    now = now or timezone.now()
    causes: dict[str, list[str]] = defaultdict(list)
    for node_name, gpu, description in (
        HealthEvent.objects.filter(cluster=cluster)
        .sickening()
        .values_list("node_name", "gpu", "description")
    ):
        causes[node_name].append(f"{policy.where(node_name, gpu)}: {description}")
    sick = set(causes)
    changed = False
    for node in kube.list("Node") if nodes is None else nodes:
        name = node["metadata"]["name"]
        has = _own_taint(node)
        if (name in sick) == has:
            continue
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if not _is_own(t)]
        if name in sick:
            taints.append(
                {"key": TAINT_KEY, "value": settings.PORTAL_INSTANCE, "effect": TAINT_EFFECT}
            )
        # The resourceVersion makes the patch fail rather than drop a taint added meanwhile.
        kube.merge_patch(
            "Node",
            name,
            {
                "metadata": {"resourceVersion": node["metadata"].get("resourceVersion")},
                "spec": {"taints": taints or None},
            },
        )
        changed = True
        (result.tainted if name in sick else result.untainted).append(name)
        audit.record(
            actor=None,
            verb="node.health_tainted" if name in sick else "node.health_untainted",
            obj=None,
            object_type="node",
            tenant=None,
            after={
                "node": name,
                "taint": f"{TAINT_KEY}={settings.PORTAL_INSTANCE}:{TAINT_EFFECT}",
                # the signals that keep it sick; none left when the taint goes
                "because": causes.get(name, []),
            },
        )
    NodeHealth.objects.filter(cluster=cluster).update(tainted=False)
    NodeHealth.objects.filter(cluster=cluster, node_name__in=sick).update(tainted=True)
    drain(kube, cluster, result, now)
    if changed:
        inventory.sync_inventory(kube, cluster_name=cluster.name)
    return result


def _is_own(taint: dict) -> bool:
    return taint.get("key") == TAINT_KEY and taint.get("value") == settings.PORTAL_INSTANCE
