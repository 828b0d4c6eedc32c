"""Reads of workloads: what each tenant's workloads hold (for other layers), and a workload's
env as a given reader may see it (for the page and the API alike)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from core.permissions import is_platform_admin
from scheduler.workloads.models import Workload
from tenants.models import Membership, Tenant
from tenants.permissions import WRITE_ROLES, can_ask


def usage_by_tenant(tenant_ids: list[int]) -> dict[int, dict[str, int]]:
    """tenant id -> {resource class slug -> units its workloads hold} (one query)."""
    out: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    rows = Workload.objects.holding().filter(tenant_id__in=tenant_ids)
    for w in rows.only("tenant_id", "kind", "replicas", "max_replicas", "resources"):
        for slug, units in w.units_held().items():
            out[w.tenant_id][slug] += units
    return out


def can_read_env_values(user, tenant: Tenant) -> bool:
    """Those who may submit the team's workloads (members, owners, platform admins) read the
    values of their env; viewers read only the names."""
    return can_ask(user, tenant)


def env_values_readable(user) -> Callable[[int], bool]:
    """`can_read_env_values` for many workloads at once, by tenant id: at most two queries
    however many tenants a list shows."""
    if is_platform_admin(user):
        return lambda tenant_id: True
    if not getattr(user, "is_authenticated", False):
        return lambda tenant_id: False
    writable = set(
        Membership.objects.filter(user=user, role__in=WRITE_ROLES).values_list(
            "tenant_id", flat=True
        )
    )
    return writable.__contains__


def env_shown(env: Mapping[str, Any], *, values: bool) -> dict[str, Any]:
    """A workload's env for a reader: every name, with its plain value or its Secret reference
    ({"secret", "key"}) when `values`, else None (the value is hidden, not empty)."""
    return {name: (value if values else None) for name, value in env.items()}
