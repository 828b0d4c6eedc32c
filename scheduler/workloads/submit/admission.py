"""Admission of a workload, the portal's side: what the cluster cannot see, checked under the
tenant row's lock by `services.submit_workload` (the resource classes asked for, the per-model
split of the team's grants, the pools that could ever hold it, the critical-priority quota, the
reads that decide it in one statement, and a job's maximum run time). Each refusal says what to
change."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q, Sum

from catalog import dra_quota, gpu_serving, run_limits, slices
from catalog.models import Pool, ResourceClass
from core.errors import InvalidInput, QuotaExceeded
from scheduler.cluster import node_offers
from scheduler.cluster.models import Node
from scheduler.workloads.kinds import gang
from scheduler.workloads.models import Workload
from scheduler.workloads.submit.placement import check_topology
from scheduler.workloads.submit.spec import Refusals, WorkloadSpec
from tenants.models import QuotaGrant, Tenant
from tenants.models.priority_classes import CRITICAL_PRIORITY_CLASS


def resolve_resources(
    resources: Any,
) -> tuple[list[tuple[ResourceClass, int]], list[ResourceClass]]:
    """The asked classes with their units, and (in slices) every class of the asked model, each
    read with its pool (`rc.pool`; none: nothing may be borrowed) in one query, before the
    tenant's lock: a pool's borrowing limit is the fleet's policy, which the tenant's lock does
    not serialise."""
    if not isinstance(resources, dict) or not resources:
        raise InvalidInput(
            "ask for at least one resource class, e.g. {'a100-80gb-mig-3g.40gb': 1}",
            field="resources",
        )
    wanted = Q(slug__in=list(resources))
    if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES:
        asked_models = ResourceClass.objects.filter(slug__in=list(resources)).values("gpu_model")
        wanted |= Q(gpu_model__in=asked_models)
    read = list(ResourceClass.objects.filter(wanted).select_related("pool"))
    known = {rc.slug: rc for rc in read}
    out = []
    for slug, units in resources.items():
        rc = known.get(slug)
        if rc is None or not rc.active:
            raise InvalidInput(
                f"unknown resource class {slug!r}; see /api/v1/resource-classes/",
                field="resources",
            )
        if isinstance(units, bool) or not isinstance(units, int) or units < 1:
            raise InvalidInput(f"{slug}: units must be a whole number ≥ 1", field="resources")
        out.append((rc, units))
    models = {rc.gpu_model for rc, _ in out}
    if len(models) > 1:
        raise InvalidInput(
            f"one workload runs on one GPU model; this asks for {sorted(models)}",
            field="resources",
        )
    names = [rc.resource_name for rc, _ in out]
    if len(set(names)) != len(names):
        raise InvalidInput("two classes here share one Kubernetes resource", field="resources")
    return out, [rc for rc in read if rc.gpu_model in models]


def check_fits(
    tenant: Tenant,
    asked: list[tuple[ResourceClass, int]],
    pods: int,
    priority: str,
    granted_by_class: dict[int, int],
    model_classes: list[ResourceClass],
    *,
    autoscaled: bool = False,
) -> None:
    """Refuse only what can never run: more than the team's grant plus what its pool lets it
    borrow. What fits that but not the free grant is admitted and waits in the team's Kueue
    queue until the capacity is there (its own work finishing, or idle units of other teams).
    `granted_by_class`: the grant alone (read under the lock); what the team's pods hold is
    Kueue's to weigh, not this. The pools came with the classes (`resolve_resources`)."""
    if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES:
        parts = short_in_slices(asked, pods, granted_by_class, model_classes)
    else:
        parts = []
        for rc, units in asked:
            need = units * pods
            granted = granted_by_class.get(rc.pk, 0)
            pool: Pool | None = getattr(rc, "pool", None)
            borrow = pool.borrowable(granted) if pool is not None else 0
            if pool is not None and need > pool.capacity:
                # no grant can make it fit: asking for more would only be refused
                parts.append(
                    f"{rc.slug}: needs {need}, and the pool holds only {pool.capacity}; "
                    "no grant can run it, ask for fewer units or pods"
                )
            elif need > granted + borrow:
                parts.append(
                    f"{rc.slug}: needs {need}, the grant is {granted}"
                    + (f" and {borrow} may be borrowed" if borrow else "")
                    + f"; ask for {need - granted - borrow} more"
                )
    if parts:
        at = f" ({pods} pods at min replicas)" if autoscaled else ""
        if not autoscaled and pods > 1:
            at = f" (a gang of {pods} pods, admitted all at once)"
        raise QuotaExceeded(
            f"{tenant.slug} can never run this{at}: " + "; ".join(parts),
            field="autoscaling" if autoscaled else "resources",
        )
    if priority == CRITICAL_PRIORITY_CLASS:
        check_critical(tenant, asked, pods, priority)


def check_pool_holds(
    asked: list[tuple[ResourceClass, int]], pods: int, model_classes: list[ResourceClass]
) -> None:
    """Refuse a gang larger than its pool could ever hold (every node of the model, every
    team's grant): no grant or borrowing would help, only fewer pods or a smaller shape. In
    slices, all of the model's pools count; per class, the asked class's pool. No pool: no
    capacity is known, the grant check decides."""
    rc = asked[0][0]
    if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES:
        pools = [(c, p) for c in model_classes if (p := getattr(c, "pool", None)) is not None]
        if gpu_serving.through_dra(rc.gpu_model):
            # one set of GPUs that every class is cut from: its whole GPUs' slices
            pools = [(c, p) for c, p in pools if c.kind == ResourceClass.Kind.WHOLE]
        if not pools:
            return
        capacity = sum(p.capacity * slices.slices_per_unit(c) for c, p in pools)
        per_pod = sum(units * slices.slices_per_unit(c) for c, units in asked)
        said = gang.pool_refusal(
            pods=pods, per_pod=per_pod, capacity=capacity, unit="slices", pool=rc.gpu_model
        )
    else:
        said = None
        for c, units in asked:
            pool: Pool | None = getattr(c, "pool", None)
            if pool is not None and said is None:
                said = gang.pool_refusal(
                    pods=pods, per_pod=units, capacity=pool.capacity, unit=c.slug, pool=c.slug
                )
    if said:
        raise InvalidInput(said, field="pods", code="pool_too_small")


def short_in_slices(
    asked: list[tuple[ResourceClass, int]],
    pods: int,
    granted_by_class: dict[int, int],
    classes: list[ResourceClass],
) -> list[str]:
    """What is short, in words, when the ask can never fit the team's slices of its model:
    every class of the model counts (a 7 x 1g grant runs a 4g and a 3g), borrowing as the
    queue renders it (the widest of the model's pools; with no limit, at most the model's
    capacity)."""
    model = asked[0][0].gpu_model
    granted, borrow = slices.model_allowance(classes, granted_by_class)
    need = sum(units * pods * slices.slices_per_unit(rc) for rc, units in asked)
    missing = need - granted - borrow
    if missing <= 0:
        return []
    pools = [(rc, p) for rc in classes if (p := getattr(rc, "pool", None)) is not None]
    held = sum(p.capacity * slices.slices_per_unit(rc) for rc, p in pools)
    # the one unit (issue 49, 4): what is asked as "N × shape (= X slices)", totals in slices
    needs = " + ".join(slices.units_in_slices(units * pods, rc) for rc, units in asked)
    if pools and need > held:
        # no grant can make it fit: asking for more would only be refused
        return [
            f"{model}: needs {needs}, and its pools hold only {slices.slices_of(held)}; no "
            "grant can run it, ask for fewer units or pods"
        ]
    rc = asked[0][0]
    per = slices.slices_per_unit(rc)
    more = -(-missing // per)  # in the asked class, rounded up
    return [
        f"{model}: needs {needs}, the grant is {slices.slices_of(granted)}"
        + (f" and {slices.slices_of(borrow)} may be borrowed" if borrow else "")
        + f"; ask for {slices.units_in_slices(more, rc)} more ({rc.slug})"
    ]


def check_critical(
    tenant: Tenant, asked: list[tuple[ResourceClass, int]], pods: int, priority: str
) -> None:
    """At the critical priority a tenant runs at most `critical_gpu_quota` units of each GPU
    resource: the rule its namespace's priority-scoped ResourceQuota enforces in the cluster
    (a quota counts resource names, so the portal counts the same way)."""
    held_by_slug: dict[str, int] = {}
    for w in Workload.objects.holding().filter(tenant=tenant, priority_class=priority):
        for slug, units in w.units_held().items():
            held_by_slug[slug] = held_by_slug.get(slug, 0) + units
    names = dict(
        ResourceClass.objects.filter(slug__in=list(held_by_slug)).values_list(
            "slug", "resource_name"
        )
    )
    held: dict[str, int] = {}
    for slug, units in held_by_slug.items():
        name = names.get(slug, slug)
        held[name] = held.get(name, 0) + units
    cap = tenant.critical_gpu_quota
    over = [
        f"{rc.resource_name}: {held.get(rc.resource_name, 0)} in use, this needs {units * pods}"
        for rc, units in asked
        if held.get(rc.resource_name, 0) + units * pods > cap
    ]
    if over:
        raise QuotaExceeded(
            f"{tenant.slug} may run {cap} units of each GPU resource at {priority}; "
            + "; ".join(over),
            field="priority",
        )


# Under the tenant's lock, one statement: is the name taken by a live workload of the tenant,
# the tenant's grants of the asked classes, and the new workload's id (so that its k8s name goes
# into the insert). The two reads are the managers' own querysets (`Workload.objects.live()`,
# `QuotaGrant.objects.effective()`), compiled by the ORM and nested here: no rule is restated.
_ADMISSION_SQL = (
    "SELECT EXISTS ({taken}), "
    "(SELECT COALESCE(jsonb_object_agg(g.resource_class_id, g.total), '{{}}'::jsonb) "
    "FROM ({grants}) g), nextval(pg_get_serial_sequence(%s, 'id'))"
)


def _name_taken(tenant: Tenant, name: str):
    return Workload.objects.live().filter(tenant_id=tenant.pk, name=name).values("pk")


def _grants(tenant: Tenant, asked: list[tuple[ResourceClass, int]]):
    # in slices, every grant of the model counts (one workload runs on one model)
    of_asked = (
        Q(resource_class__gpu_model__in={rc.gpu_model for rc, _ in asked})
        if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES
        else Q(resource_class_id__in=[rc.pk for rc, _ in asked])
    )
    return (
        QuotaGrant.objects.effective()
        .filter(of_asked, tenant_id=tenant.pk)
        .values("resource_class_id")
        .annotate(total=Sum("amount"))
        .order_by()
    )


def admission_reads(
    tenant: Tenant, name: str, asked: list[tuple[ResourceClass, int]]
) -> tuple[bool, dict[int, int], int]:
    """(name taken?, resource class id -> units granted, the next workload id)."""
    taken, grants = _name_taken(tenant, name), _grants(tenant, asked)
    taken_sql, taken_params = taken.query.sql_with_params()
    grants_sql, grants_params = grants.query.sql_with_params()
    sql = _ADMISSION_SQL.format(taken=taken_sql, grants=grants_sql)
    table = connection.ops.quote_name(Workload._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, [*taken_params, *grants_params, table])
        name_taken, by_class, next_id = cursor.fetchone()
    if isinstance(by_class, str):  # Django's connection leaves jsonb to the fields that read it
        by_class = json.loads(by_class)
    return bool(name_taken), {int(pk): int(units) for pk, units in by_class.items()}, next_id


# --- every refusal at once -----------------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    """What admission weighs of a submit; None where the submit's own checks refused the field
    (the checks that need it are skipped, the others still run)."""

    kind: str | None
    resources: Mapping[str, int] | None
    pods: int | None  # a deployment's replicas (an autoscaled one's minimum), a job's gang
    priority: str | None
    name: str | None = None
    topology: str = ""
    autoscaled: bool = False

    @classmethod
    def of(cls, spec: WorkloadSpec) -> Ask:
        return cls(
            kind=spec.kind,
            resources=dict(spec.resources),
            pods=spec.size.pods,
            priority=spec.priority,
            name=spec.name,
            topology=spec.topology,
            autoscaled=spec.size.autoscaling is not None,
        )


@dataclass(frozen=True)
class Resolved:
    asked: list[tuple[ResourceClass, int]]
    model_classes: list[ResourceClass]
    topology: str  # as stored
    pool_holds: bool = True  # False: no pool could ever hold the gang (the grant is moot)


def check_dra_pod(asked: list[tuple[ResourceClass, int]]) -> None:
    """A pod of a model served through DRA gets all its devices on one node: refuse a profile
    or a count that no node of the model could ever hold (400 naming what exists)."""
    model = asked[0][0].gpu_model
    if not gpu_serving.through_dra(model):
        return
    sizes = Node.objects.filter(
        gpu_model=model, mig_strategy=node_offers.DRA, cluster__archived_at__isnull=True
    ).values_list("gpu_count", flat=True)
    per_node = max(sizes, default=None)
    for rc, units in asked:
        profile = rc.profile if rc.kind == ResourceClass.Kind.MIG else dra_quota.WHOLE_GPU
        dra_quota.check_request(model, profile, units, gpus_per_node=per_node)
    if per_node is not None:
        need = sum(units * slices.slices_per_unit(rc) for rc, units in asked)
        if need > per_node * slices.SLICES_PER_GPU:
            raise InvalidInput(
                f"one pod of these asks {need} compute slices; a {model} node holds at most "
                f"{per_node * slices.SLICES_PER_GPU} ({per_node} GPUs): ask for less a pod",
                field="resources",
            )


def check_shape(bad: Refusals, ask: Ask) -> Resolved | None:
    """Before the tenant's lock (the catalog and the fleet): the classes asked for, a gang
    against its pool, the topology. Each refusal is kept in `bad`; None when the classes are."""
    if ask.resources is None:
        return None
    resolved = bad.check("resources", resolve_resources, dict(ask.resources))
    if resolved is None:
        return None
    asked, model_classes = resolved
    bad.check("resources", check_dra_pod, asked)
    topology, holds = "", True
    if ask.pods is not None and ask.kind is not None:
        if ask.kind == Workload.Kind.JOB and ask.pods > 1:
            before = len(bad.refused)
            bad.check("pods", check_pool_holds, asked, ask.pods, model_classes)
            holds = len(bad.refused) == before
        topology = (
            bad.check(
                "topology", check_topology, ask.topology, kind=ask.kind, pods=ask.pods, asked=asked
            )
            or ""
        )
    return Resolved(asked, model_classes, topology, holds)


def check_team(
    bad: Refusals,
    tenant: Tenant,
    ask: Ask,
    resolved: Resolved | None,
    *,
    name_taken: bool,
    granted_by_class: dict[int, int],
) -> None:
    """The tenant's rules (under its lock in a submit): the priority it may use, the name it
    has free, the grant it can ever fit in. Each refusal is kept in `bad`."""
    allowed = tenant.allowed_priority_classes or []
    may_use = ask.priority in allowed
    if ask.priority is not None and not may_use:
        bad.refuse(
            "priority",
            InvalidInput(
                f"{tenant.slug} may use {' or '.join(sorted(allowed)) or 'no priority class'}, "
                f"not {ask.priority}",
                field="priority",
                code="priority_not_allowed",
            ),
        )
    if name_taken:
        bad.refuse(
            "name",
            InvalidInput(f"{tenant.slug} already runs a workload named {ask.name!r}", field="name"),
        )
    fits_known = resolved is not None and resolved.pool_holds
    if resolved is not None and fits_known and ask.pods is not None and ask.priority is not None:
        bad.check(
            "resources",
            check_fits,
            tenant,
            resolved.asked,
            ask.pods,
            ask.priority if may_use else "",  # a class it may not use has no cap to weigh
            granted_by_class,
            resolved.model_classes,
            autoscaled=ask.autoscaled,
        )


def check_ask(tenant: Tenant, ask: Ask) -> Refusals:
    """Every refusal admission would give `ask` now, all at once and without writing (no lock:
    a form's one round of errors, and its preview). The submit checks again under the lock."""
    bad = Refusals()
    resolved = check_shape(bad, ask)
    taken = bool(ask.name) and _name_taken(tenant, ask.name or "").exists()
    granted: dict[int, int] = {}
    if resolved is not None:
        granted = {
            row["resource_class_id"]: row["total"] for row in _grants(tenant, resolved.asked)
        }
    check_team(bad, tenant, ask, resolved, name_taken=taken, granted_by_class=granted)
    return bad


def max_run_s(tenant: Tenant, kind: str, asked: list[tuple[ResourceClass, int]]) -> int | None:
    """A job's maximum run time: the smallest of its team's (the locked row) and its classes'
    pools' (read with the classes). A deployment serves until stopped: none."""
    if kind != Workload.Kind.JOB:
        return None
    return run_limits.job_limit(tenant.max_run_s, (rc for rc, _ in asked))
