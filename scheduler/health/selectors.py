"""What the pages read of GPU health."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from scheduler.health.models import HealthEvent, HealthImpact, NodeHealth


def team_notices(tenant, *, days: int = 7, limit: int = 10) -> list[HealthImpact]:
    """The team's pods that sick GPUs hit lately (stopped, or left on a tainted node)."""
    since = timezone.now() - timedelta(days=days)
    return list(
        HealthImpact.objects.filter(tenant=tenant, event__opened_at__gte=since)
        .select_related("event", "workload")
        .order_by("-event__opened_at", "eviction_order")[:limit]
    )


def node_states() -> dict[str, NodeHealth]:
    """node name -> its health, for the capacity map."""
    return {n.node_name: n for n in NodeHealth.objects.all()}


def sick_gpus() -> dict[str, set[str]]:
    """node name -> indexes of GPUs with an open taint or drain event."""
    out: dict[str, set[str]] = {}
    for node, gpu in HealthEvent.objects.sickening().values_list("node_name", "gpu"):
        out.setdefault(node, set()).add(gpu)
    return out
