"""Reads of workloads that other layers need: what each tenant's workloads hold."""

from __future__ import annotations

from collections import defaultdict

from scheduler.workloads.models import Workload


def usage_by_tenant(tenant_ids: list[int]) -> dict[int, dict[str, int]]:
    """tenant id -> {resource class slug -> units its workloads hold} (one query)."""
    out: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    rows = Workload.objects.holding().filter(tenant_id__in=tenant_ids)
    for w in rows.only("tenant_id", "kind", "replicas", "max_replicas", "resources"):
        for slug, units in w.units_held().items():
            out[w.tenant_id][slug] += units
    return out
