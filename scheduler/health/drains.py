"""Draining a sick node: its GPU pods are evicted lowest priority first through the Eviction
API (a PodDisruptionBudget holds a pod until the next check), each stopped workload gets an
event saying why, and each team whose pods stopped is told."""

from __future__ import annotations

from collections import defaultdict

from core import audit
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster
from scheduler.health.models import HealthEvent, HealthImpact
from scheduler.health.pods import gpu_pods, tenants_by_namespace, workload_of
from scheduler.health.results import HealthCheck
from scheduler.workloads.models import WorkloadEvent
from tenants.notifications import notify


def drain(kube: KubeGateway, cluster: Cluster, result: HealthCheck, now) -> None:
    """Evict the GPU pods of nodes with an undrained drain event, lowest priority first; a pod
    a PodDisruptionBudget protects is tried again at the next check."""
    pending = (
        HealthEvent.objects.filter(cluster=cluster, action="drain", drained_at__isnull=True)
        .open()
        .order_by("opened_at")
    )
    by_node: dict[str, list[HealthEvent]] = defaultdict(list)
    for event in pending:
        by_node[event.node_name].append(event)
    tenants = tenants_by_namespace(kube) if by_node else {}
    for node, events in by_node.items():
        first = events[0]
        blocked: list[str] = []
        stopped: list[HealthImpact] = []
        order = HealthImpact.objects.filter(event=first, evicted_at__isnull=False).count()
        for pod in gpu_pods(kube, node):
            meta = pod["metadata"]
            impact, _ = HealthImpact.objects.get_or_create(
                event=first,
                pod_uid=meta.get("uid", ""),
                defaults={
                    "namespace": meta.get("namespace", ""),
                    "pod_name": meta["name"],
                    "tenant": tenants.get(meta.get("namespace", "")),
                    "workload": workload_of(pod),
                    "priority": (pod.get("spec") or {}).get("priority") or 0,
                },
            )
            outcome = kube.evict(meta["name"], meta.get("namespace", ""))
            key = f"{meta.get('namespace', '')}/{meta['name']}"
            if outcome == "blocked":
                blocked.append(key)
                impact.outcome = HealthImpact.Outcome.BLOCKED
                impact.save(update_fields=["outcome"])
                continue
            order += 1
            impact.outcome = (
                HealthImpact.Outcome.EVICTED if outcome == "evicted" else HealthImpact.Outcome.GONE
            )
            impact.evicted_at, impact.eviction_order = now, order
            impact.save(update_fields=["outcome", "evicted_at", "eviction_order"])
            if outcome == "evicted":
                result.evicted.append(key)
                stopped.append(impact)
                _tell_workload(impact, first)
        message = (
            f"a PodDisruptionBudget allows no disruption of {', '.join(blocked)}: tried again "
            "at the next check"
            if blocked
            else f"evicted {order} pod(s)"
        )
        result.blocked += blocked
        _tell_tenants(first, stopped)
        for event in events:
            event.drain_message = message[:500]
            if not blocked:
                event.drained_at = now
            event.save(update_fields=["drain_message", "drained_at"])
        audit.record(
            actor=None,
            verb="node.health_drained" if not blocked else "node.health_drain_blocked",
            obj=first,
            tenant=None,
            after={"node": node, "message": message[:500], "because": first.description},
        )


def _tell_tenants(event: HealthEvent, stopped: list[HealthImpact]) -> None:
    """Each team whose pods the drain stopped hears it on its channels and its owners' mail."""
    by_tenant: dict[int, list[HealthImpact]] = defaultdict(list)
    for impact in stopped:
        if impact.tenant_id is not None:
            by_tenant[impact.tenant_id].append(impact)
    for impacts in by_tenant.values():
        notify(
            "gpu.health",
            impacts[0].tenant,
            subject=f"{len(impacts)} of your pods stopped: {event.where} reported "
            f"{event.description}",
            text="\n".join(i.message for i in impacts),
            data={"node": event.node_name, "gpu": event.gpu, "pods": [i.pod_name for i in impacts]},
        )


def _tell_workload(impact: HealthImpact, event: HealthEvent) -> None:
    if impact.workload is None:
        return
    WorkloadEvent.objects.create(
        workload=impact.workload,
        reason="GPUHealth",
        message=f"stopped because {event.where} reported {event.description}",
    )
