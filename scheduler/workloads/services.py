"""Workloads: what a team asks to run, admitted in the portal.

- `submit_workload` checks everything the cluster cannot see (the per-model split of a tenant's
  grants, the image allow-list, priority classes, the `workload_admission` hook: metering's
  budget; the admission checks are `scheduler.workloads.submit.admission`) under a lock of the
  tenant row, writes the workload and its audit event, and on commit queues its creation in a
  worker.
- `cancel_workload` moves the workload to cancelled in one transaction and queues the deletion
  of its cluster object only when that transaction commits.
- Following the cluster (create, sync, delete, logs) is `scheduler.workloads.lifecycle.sync`; the
  pure manifests are `scheduler.workloads.kinds.manifests`; the database-free checks of the
  submitted fields are `scheduler.workloads.submit.input`.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core import audit
from core.errors import InvalidInput, InvalidTransition
from core.tasks import send_hint
from scheduler.workloads import tasks
from scheduler.workloads.kinds import serving
from scheduler.workloads.kinds.manifests import Observation
from scheduler.workloads.lifecycle.sync import change_state
from scheduler.workloads.models import DEFAULT_REPLICAS, Workload, WorkloadEvent
from scheduler.workloads.submit import admission
from scheduler.workloads.submit.input import (
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
from scheduler.workloads.submit.placement import check_topology
from tenants import hooks
from tenants.models import Tenant
from tenants.models.priority_classes import PRIORITY_CLASSES
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
    asked, model_classes = admission.resolve_resources(resources)
    # a deployment's replicas (an autoscaled one's minimum: quota follows the pods Kueue
    # admits as it scales), a job's gang
    held_pods = replicas
    # the namespace's cpu/memory backstop is fixed: the most pods must fit it
    most_pods = scaling["max_replicas"] if scaling is not None else replicas
    check_fits_namespace(pod_asks, most_pods)  # pure: no need to hold the tenant's lock for it
    if kind == Workload.Kind.JOB and held_pods > 1:
        admission.check_pool_holds(
            asked, held_pods, model_classes
        )  # the fleet's size, not the team's
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
        name_taken, granted_by_class, workload.pk = admission.admission_reads(tenant, name, asked)
        if name_taken:
            raise InvalidInput(
                f"{tenant.slug} already runs a workload named {name!r}", field="name"
            )
        admission.check_fits(
            tenant,
            asked,
            held_pods,
            priority,
            granted_by_class,
            model_classes,
            autoscaled=scaling is not None,
        )
        workload.tenant = tenant
        workload.max_run_s = audited["max_run_s"] = admission.max_run_s(tenant, kind, asked)
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
