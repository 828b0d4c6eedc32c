"""What the grants' placements (tenants/placement.py) mean on the registered fleet: which
workers each team's work may run on, and the MultiKueue dispatch target (AdmissionCheck and
MultiKueueConfig, render/multikueue.py) its queue on the manager carries. Read from
PostgreSQL in a fixed number of queries; no cluster call.

A single-cluster install has no workers and no placements: the plan is empty and every queue
renders as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from scheduler.cluster.models import Cluster
from scheduler.cluster.render.multikueue import (
    DispatchTarget,
    WorkerSpec,
    group_target_name,
    secret_copy_name,
    worker_target_name,
)
from tenants import placement
from tenants.models import QuotaGrant


def placement_problem(value: str) -> str:
    """What is wrong with a placement on this fleet ("" when it names a registered worker or a
    group with at least one): the `tenants.hooks.placement_problem` answer."""
    where = placement.parse(value)
    if where.is_home:
        return ""
    workers = list(Cluster.objects.workers().values_list("name", "group"))
    if not workers:
        return (
            "no worker cluster is registered: register one (More → Clusters) before placing "
            "work on it, or leave the placement empty for the portal's own cluster"
        )
    if where.kind == "cluster" and where.name not in {name for name, _ in workers}:
        names = ", ".join(name for name, _ in workers)
        return f"no active worker {where.name!r} is registered (workers: {names})"
    if where.kind == "group" and where.name not in {group for _, group in workers if group}:
        groups = ", ".join(sorted({g for _, g in workers if g})) or "none"
        return f"no active worker is in group {where.name!r} (groups: {groups})"
    return ""


def worker_spec(cluster: Cluster) -> WorkerSpec:
    """A worker as MultiKueue reads it: its kubeconfig Secret in Kueue's namespace (the
    platform's own Secret when it lives there, else the portal's copy)."""
    in_kueue_ns = cluster.credentials_secret_namespace == settings.KUEUE_CONFIG_NAMESPACE
    secret = (
        cluster.credentials_secret_name
        if in_kueue_ns
        else secret_copy_name(settings.PORTAL_INSTANCE, cluster.name)
    )
    return WorkerSpec(cluster.name, secret, cluster.preference, cluster.group)


@dataclass(frozen=True)
class FleetPlan:
    workers: dict[str, Cluster] = field(default_factory=dict)  # active workers by name
    placements: dict[int, str] = field(default_factory=dict)  # tenant id -> placement (not home)

    def workers_of(self, value: str) -> list[Cluster]:
        """The active workers a placement may run on, in the platform's order."""
        where = placement.parse(value)
        if where.kind == "cluster":
            chosen = [self.workers[where.name]] if where.name in self.workers else []
        elif where.kind == "group":
            chosen = [w for w in self.workers.values() if w.group == where.name]
        else:
            chosen = []
        return sorted(chosen, key=lambda w: (w.preference, w.name))

    def check_of(self, value: str) -> str:
        """The AdmissionCheck a queue of this placement carries ("" at home, or with no
        worker left to dispatch to: then Kueue would hold its work for a check that is not)."""
        where = placement.parse(value)
        if where.is_home or not self.workers_of(value):
            return ""
        name = group_target_name if where.kind == "group" else worker_target_name
        return name(settings.PORTAL_INSTANCE, where.name)

    def targets(self) -> list[DispatchTarget]:
        """One per placement in use that has workers."""
        out = {}
        for value in set(self.placements.values()):
            if check := self.check_of(value):
                out[check] = DispatchTarget(
                    check, tuple(worker_spec(w) for w in self.workers_of(value))
                )
        return [out[name] for name in sorted(out)]

    def tenants_on(self, worker: str) -> set[int]:
        """Tenants whose work may run on this worker."""
        return {
            tenant_id
            for tenant_id, value in self.placements.items()
            if worker in {w.name for w in self.workers_of(value)}
        }

    def copies(self) -> list[Cluster]:
        """Workers whose kubeconfig Secret MultiKueue cannot read where it is (outside Kueue's
        namespace) and that a target names: the portal keeps a copy in Kueue's namespace."""
        named = {spec.name for target in self.targets() for spec in target.workers}
        return [
            self.workers[name]
            for name in sorted(named)
            if self.workers[name].credentials_secret_namespace != settings.KUEUE_CONFIG_NAMESPACE
        ]


def placements(tenant_ids: Iterable[int] | None = None) -> dict[int, str]:
    """Tenant id -> where its grants that still hold run, for those placed on workers."""
    grants = QuotaGrant.objects.holding(timezone.now()).exclude(placement="")
    if tenant_ids is not None:
        grants = grants.filter(tenant_id__in=list(tenant_ids))
    return dict(grants.values_list("tenant_id", "placement"))


def fleet_plan(tenant_ids: Iterable[int] | None = None) -> FleetPlan:
    """The plan of the whole fleet (or of these tenants' placements): two queries."""
    workers = {c.name: c for c in Cluster.objects.workers()}
    if not workers:
        return FleetPlan()
    return FleetPlan(workers, placements(tenant_ids))
