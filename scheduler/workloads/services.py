"""Workloads: what a team asks to run, admitted in the portal.

- `submit_workload` checks everything the cluster cannot see (the per-model split of a tenant's
  grants, the image allow-list, priority classes, the `workload_admission` hook: metering's
  budget) under a lock of the tenant row, writes the workload and its audit event, and on
  commit queues its creation in a worker.
- `cancel_workload` moves the workload to cancelled in one transaction and queues the deletion
  of its cluster object only when that transaction commits.
- Following the cluster (create, sync, delete, logs) is `scheduler.workloads.sync`; the pure
  manifests are `scheduler.workloads.manifests`; the database-free checks of the submitted fields
  are `scheduler.workloads.input`.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from core import audit
from core.errors import InvalidInput, InvalidTransition, QuotaExceeded
from core.tasks import send_hint
from scheduler.catalog import run_limits, slices
from scheduler.catalog.models import Pool, ResourceClass
from scheduler.workloads import gang, serving, tasks
from scheduler.workloads.input import (
    MAX_BACKOFF_LIMIT,
    MAX_REPLICAS,
    check_autoscaling,
    check_env,
    check_fits_namespace,
    check_image,
    check_labels,
    check_quantity,
    check_secret_names,
    check_shm,
    check_strings,
    check_volumes,
)
from scheduler.workloads.manifests import Observation
from scheduler.workloads.models import DEFAULT_REPLICAS, Workload, WorkloadEvent
from scheduler.workloads.sync import change_state
from scheduler.workloads.topology_check import check_topology
from tenants import hooks
from tenants.models import QuotaGrant, Tenant
from tenants.models.priority_classes import CRITICAL_PRIORITY_CLASS, PRIORITY_CLASSES
from tenants.models.tenants import dns_label
from tenants.permissions import WRITE_ROLES, require_role

# What a workload asks of its pod besides GPUs: stored, rendered, shown and audited alike.
POD_SPEC_FIELDS = [
    "cpu",
    "memory",
    "ephemeral_storage",
    "shm",
    "volumes",
    "env_from_secrets",
    "image_pull_secrets",
]

# --- admission (portal side) -----------------------------------------------------------------


def _resolve_resources(
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


def _check_fits(
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
    Kueue's to weigh, not this. The pools came with the classes (`_resolve_resources`)."""
    if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES:
        parts = _short_in_slices(asked, pods, granted_by_class, model_classes)
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
        _check_critical(tenant, asked, pods, priority)


def _check_pool_holds(
    asked: list[tuple[ResourceClass, int]], pods: int, model_classes: list[ResourceClass]
) -> None:
    """Refuse a gang larger than its pool could ever hold (every node of the model, every
    team's grant): no grant or borrowing would help, only fewer pods or a smaller shape. In
    slices, all of the model's pools count; per class, the asked class's pool. No pool: no
    capacity is known, the grant check decides."""
    rc = asked[0][0]
    if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES:
        pools = [(c, p) for c in model_classes if (p := getattr(c, "pool", None)) is not None]
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


def _short_in_slices(
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
    if pools and need > held:
        # no grant can make it fit: asking for more would only be refused
        return [
            f"{model}: needs {need} slices, and its pools hold only {held}; no grant can run "
            "it, ask for fewer units or pods"
        ]
    rc = asked[0][0]
    per = slices.slices_per_unit(rc)
    more = -(-missing // per)  # in the asked class, rounded up
    return [
        f"{model}: needs {need} slices, the grant is {granted}"
        + (f" and {borrow} may be borrowed" if borrow else "")
        + f"; ask for {missing} more slices ({more} more {rc.slug} at {per} each)"
    ]


def _check_critical(
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


def _admission_reads(
    tenant: Tenant, name: str, asked: list[tuple[ResourceClass, int]]
) -> tuple[bool, dict[int, int], int]:
    """(name taken?, resource class id -> units granted, the next workload id)."""
    taken = Workload.objects.live().filter(tenant_id=tenant.pk, name=name).values("pk")
    # in slices, every grant of the model counts (one workload runs on one model)
    of_asked = (
        Q(resource_class__gpu_model__in={rc.gpu_model for rc, _ in asked})
        if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES
        else Q(resource_class_id__in=[rc.pk for rc, _ in asked])
    )
    grants = (
        QuotaGrant.objects.effective()
        .filter(of_asked, tenant_id=tenant.pk)
        .values("resource_class_id")
        .annotate(total=Sum("amount"))
        .order_by()
    )
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


def _max_run_s(tenant: Tenant, kind: str, asked: list[tuple[ResourceClass, int]]) -> int | None:
    """A job's maximum run time: the smallest of its team's (the locked row) and its classes'
    pools' (read with the classes). A deployment serves until stopped: none."""
    if kind != Workload.Kind.JOB:
        return None
    pools = [getattr(rc, "pool", None) for rc, _ in asked]
    return run_limits.smallest_limit(
        tenant.max_run_s, *(pool.max_run_s for pool in pools if pool is not None)
    )


def _enqueue_create(workload_id: int) -> None:
    # the periodic sync creates what a lost message left behind
    send_hint(tasks.create_workload, f"workload {workload_id}", workload_id=workload_id)


def submit_workload(
    *,
    actor,
    tenant: Tenant,
    name: str,
    kind: str,
    image: str,
    resources: dict,
    priority: str,
    command: list | None = None,
    args: list | None = None,
    env: dict | None = None,
    labels: dict | None = None,
    replicas: int = DEFAULT_REPLICAS,
    pods: int | None = None,
    backoff_limit: int = 0,
    autoscaling: dict | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    ephemeral_storage: str | None = None,
    shm: str | None = None,
    volumes: list | None = None,
    env_from_secrets: list | None = None,
    image_pull_secrets: list | None = None,
    topology: str | None = None,
    ports: list | None = None,
    probes: dict | None = None,
) -> Workload:
    """Admit a workload and queue its creation on the cluster (after commit). An autoscaled
    deployment starts at `min_replicas` and is admitted when they fit the grant; its autoscaler
    may go up to `max_replicas`, each pod beyond the grant waiting in Kueue. A deployment with
    `ports` is an inference service (a ClusterIP Service, `probes`: `serving.py`).
    cpu, memory and ephemeral storage are requests = limits of its container (left out: the
    namespace's defaults); volumes, env_from_secrets and image_pull_secrets name existing
    PersistentVolumeClaims and Secrets of the team's namespace. A job of `pods` > 1 is a gang
    (`gang.py`): N pods of one shape, quota checked for all N, admitted whole by Kueue, in one
    rack when `topology` asks (`topology_check.py`)."""
    require_role(actor, tenant, WRITE_ROLES, "submit workloads")
    try:
        dns_label(name or "")
    except ValidationError as exc:
        raise InvalidInput(f"name {name!r}: {exc.messages[0]}", field="name") from None
    if kind not in Workload.Kind.values:
        raise InvalidInput(f"kind must be one of {Workload.Kind.values}", field="kind")
    check_image(image)
    command = check_strings(command, "command")
    args = check_strings(args, "args")
    env = check_env(env)
    labels = check_labels(labels)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise InvalidInput("replicas must be a whole number ≥ 1", field="replicas")
    if kind == Workload.Kind.JOB and replicas != 1:
        raise InvalidInput(
            "a job's pods are `pods` (a gang that starts together), not replicas: "
            "leave replicas at 1",
            field="replicas",
        )
    if pods is not None:
        if isinstance(pods, bool) or not isinstance(pods, int) or pods < 1:
            raise InvalidInput("pods must be a whole number ≥ 1", field="pods")
        if kind != Workload.Kind.JOB and pods != 1:
            raise InvalidInput(
                "pods is for jobs (a gang of N pods); a deployment scales by replicas",
                field="pods",
            )
        if pods > MAX_REPLICAS:
            raise InvalidInput(f"at most {MAX_REPLICAS} pods", field="pods")
        if kind == Workload.Kind.JOB:
            replicas = pods  # stored as the job's replicas: the pods it runs at once
    if replicas > MAX_REPLICAS:
        raise InvalidInput(f"at most {MAX_REPLICAS} replicas", field="replicas")
    scaling = check_autoscaling(autoscaling, kind, replicas)
    if scaling is not None:
        replicas = scaling["min_replicas"]
    if not isinstance(backoff_limit, int) or not 0 <= backoff_limit <= MAX_BACKOFF_LIMIT:
        raise InvalidInput(f"backoff_limit must be 0–{MAX_BACKOFF_LIMIT}", field="backoff_limit")
    if priority not in PRIORITY_CLASSES:
        raise InvalidInput(f"priority must be one of {list(PRIORITY_CLASSES)}", field="priority")
    pod_asks = {
        "cpu": check_quantity(cpu, "cpu"),
        "memory": check_quantity(memory, "memory"),
        "ephemeral_storage": check_quantity(ephemeral_storage, "ephemeral_storage"),
    }
    pod_asks["shm"] = check_shm(shm, pod_asks["memory"])
    volumes = check_volumes(volumes)
    env_from_secrets = check_secret_names(env_from_secrets, "env_from_secrets")
    image_pull_secrets = check_secret_names(image_pull_secrets, "image_pull_secrets")
    ports = serving.check_ports(ports, kind)
    probes = serving.check_probes(probes, kind, ports)
    asked, model_classes = _resolve_resources(resources)
    # a deployment's replicas (an autoscaled one's minimum: quota follows the pods Kueue
    # admits as it scales), a job's gang
    held_pods = replicas
    # the namespace's cpu/memory backstop is fixed: the most pods must fit it
    most_pods = scaling["max_replicas"] if scaling is not None else replicas
    check_fits_namespace(pod_asks, most_pods)  # pure: no need to hold the tenant's lock for it
    if kind == Workload.Kind.JOB and held_pods > 1:
        _check_pool_holds(asked, held_pods, model_classes)  # the fleet's size, not the team's
    topology = check_topology(topology, kind=kind, pods=held_pods, asked=asked)
    # The row and its audit picture are built before the lock: under it, only what must be
    # serialised (the tenant's state, the name, the grants, the insert) and the writes.
    workload = Workload(
        tenant=tenant,
        name=name,
        kind=kind,
        image=image,
        command=command,
        args=args,
        env=env,
        labels=labels,
        resources={rc.slug: units for rc, units in asked},
        gpu_model=asked[0][0].gpu_model,
        priority_class=priority,
        replicas=replicas,
        backoff_limit=backoff_limit,
        topology=topology,
        max_replicas=scaling["max_replicas"] if scaling else None,
        target_gpu_util=scaling["target_gpu_util"] if scaling else None,
        target_latency_ms=scaling["target_latency_ms"] if scaling else None,
        **pod_asks,
        volumes=volumes,
        env_from_secrets=env_from_secrets,
        image_pull_secrets=image_pull_secrets,
        ports=ports,
        probes=probes,
        submitted_by=actor,
    )
    audited = {
        **audit.snapshot(workload, ["name", "kind", "image", "priority_class", "state"]),
        "resources": workload.resources,
        "replicas": replicas,
        "autoscaling": workload.autoscaling,
        "topology": topology,
        "ports": ports,
        "probes": probes,
        **audit.snapshot(workload, POD_SPEC_FIELDS),
    }
    with transaction.atomic():
        # The tenant row serialises admissions of one tenant: two submits cannot both take
        # the last free unit, nor the same name.
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        if not tenant.is_active:
            raise InvalidTransition(f"{tenant.slug} is {tenant.status}: nothing can run")
        hooks.workload_admission(tenant)  # metering's budget check (portal/wiring.py)
        if priority not in (tenant.allowed_priority_classes or []):
            allowed = sorted(tenant.allowed_priority_classes or [])
            raise InvalidInput(
                f"{tenant.slug} may use {' or '.join(allowed) or 'no priority class'}, "
                f"not {priority}",
                field="priority",
                code="priority_not_allowed",
            )
        # A statement of its own, after the lock's: it reads what the submit that held the
        # lock before this one committed (READ COMMITTED takes a snapshot per statement).
        name_taken, granted_by_class, workload.pk = _admission_reads(tenant, name, asked)
        if name_taken:
            raise InvalidInput(
                f"{tenant.slug} already runs a workload named {name!r}", field="name"
            )
        _check_fits(
            tenant,
            asked,
            held_pods,
            priority,
            granted_by_class,
            model_classes,
            autoscaled=scaling is not None,
        )
        workload.tenant = tenant
        workload.max_run_s = audited["max_run_s"] = _max_run_s(tenant, kind, asked)
        workload.namespace = tenant.namespace
        workload.k8s_name = f"{name}-{workload.pk}"  # its id is known before the insert
        workload.created_at = timezone.now()  # in the order of the ids, as an insert's default
        workload.save(force_insert=True)
        WorkloadEvent.objects.create(
            workload=workload, state=workload.state, reason="Submitted", message=f"by {actor}"
        )
        audit.record(
            actor=actor, verb="workload.submitted", obj=workload, tenant=tenant, after=audited
        )
        workload_id = workload.pk
        transaction.on_commit(lambda: _enqueue_create(workload_id))
    return workload


def cancel_workload(*, actor, workload: Workload) -> Workload:
    """Cancel in one transaction: check, change state, audit; the cluster object is deleted by
    a task queued only when that transaction commits (a refused cancel queues nothing)."""
    require_role(actor, workload.tenant, WRITE_ROLES, "cancel workloads")
    with transaction.atomic():
        locked = Workload.objects.select_for_update().get(pk=workload.pk)
        if not locked.can_move_to(Workload.State.CANCELLED):
            raise InvalidTransition(
                f"workload {locked.name} is {locked.state}: only pending, running or preempted "
                "workloads can be cancelled"
            )
        change_state(
            locked.pk,
            Observation(Workload.State.CANCELLED, "Cancelled", f"by {actor}"),
            actor=actor,
        )
        workload_id = locked.pk
        transaction.on_commit(lambda: _enqueue_delete(workload_id))
    return Workload.objects.get(pk=workload.pk)


def _enqueue_delete(workload_id: int) -> None:
    # the periodic left-over pass deletes what a lost message left behind
    send_hint(tasks.delete_workload, f"workload {workload_id}", workload_id=workload_id)
