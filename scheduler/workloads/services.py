"""Workloads: what a team asks to run, admitted in the portal.

- `submit_workload` checks everything the cluster cannot see (the per-model split of a tenant's
  grants, the image allow-list, priority classes, the `workload_admission` hook: metering's
  budget; the admission checks are `scheduler.workloads.submit.admission`) under a lock of the
  tenant row, writes the workload and its audit event, and on commit queues its creation in a
  worker.
- `cancel_workload` moves the workload to cancelled in one transaction and queues the deletion
  of its cluster object only when that transaction commits.
- Following the cluster (create, sync, delete, logs) is `scheduler.workloads.lifecycle.sync`; the
  pure manifests are `scheduler.workloads.kinds.manifests`; a submit's fields are parsed into a
  `WorkloadSpec`, every database-free check with them, by `scheduler.workloads.submit.spec`.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from core import audit
from core.errors import InvalidTransition
from core.tasks import send_hint
from scheduler.workloads import tasks
from scheduler.workloads.kinds.manifests import Observation
from scheduler.workloads.lifecycle.sync import change_state
from scheduler.workloads.models import Workload, WorkloadEvent, refuse_a_workspace_run
from scheduler.workloads.submit import admission, references
from scheduler.workloads.submit.spec import POD_SPEC_FIELDS, Refusals, WorkloadSpec
from tenants import hooks
from tenants.models import Tenant
from tenants.permissions import WRITE_ROLES, require_role


def _enqueue_create(workload_id: int) -> None:
    # the periodic sync creates what a lost message left behind
    send_hint(tasks.create_workload, f"workload {workload_id}", workload_id=workload_id)


def submit_workload(
    *, actor, tenant: Tenant, spec: WorkloadSpec, check_references: bool = True
) -> Workload:
    """Admit a workload (`spec`, parsed and checked by `submit.spec.parse_spec`) and queue its
    creation on the cluster (after commit). An autoscaled deployment starts at `min_replicas`
    and is admitted when they fit the grant; its autoscaler may go up to `max_replicas`, each
    pod beyond the grant waiting in Kueue. A job of more than one pod is a gang (`kinds/gang.py`):
    N pods of one shape, quota checked for all N, admitted whole by Kueue, in one rack when its
    topology asks (`submit/placement.py`). Here: what needs the catalog and the tenant's state."""
    require_role(actor, tenant, WRITE_ROLES, "submit workloads")
    kind, priority, name = spec.kind, spec.priority, spec.name
    ask = admission.Ask.of(spec)
    # Every refusal in one answer: the catalog's and the fleet's before the lock, the
    # team's under it (what refused before the lock is said with the team's, read unlocked).
    bad = Refusals()
    resolved = admission.check_shape(bad, ask)
    if resolved is None or bad.refused:
        admission.check_ask(tenant, ask).raise_any()
    assert resolved is not None  # noqa: S101 (raised above)
    asked, topology = resolved.asked, resolved.topology
    # a deployment's replicas (an autoscaled one's minimum: quota follows the pods Kueue
    # admits as it scales), a job's gang
    held_pods = spec.size.pods
    scaling = spec.size.autoscaling
    container = spec.container
    if check_references:  # a claim it mounts must exist, or it would wait forever
        references.check_claims(tenant.namespace, (v["claim"] for v in container.volumes))
    ports, probes = list(spec.serving.ports), dict(spec.serving.probes)
    # The row and its audit picture are built before the lock: under it, only what must be
    # serialised (the tenant's state, the name, the grants, the insert) and the writes.
    workload = Workload(
        tenant=tenant,
        name=name,
        kind=kind,
        image=container.image,
        command=list(container.command),
        args=list(container.args),
        env=dict(container.env),
        labels=dict(spec.labels),
        resources={rc.slug: units for rc, units in asked},
        gpu_model=asked[0][0].gpu_model,
        priority_class=priority,
        replicas=held_pods,
        backoff_limit=spec.backoff_limit,
        topology=topology,
        max_replicas=scaling["max_replicas"] if scaling else None,
        target_gpu_util=scaling["target_gpu_util"] if scaling else None,
        target_latency_ms=scaling["target_latency_ms"] if scaling else None,
        target_requests_per_s=scaling["target_requests_per_s"] if scaling else None,
        cpu=container.cpu,
        memory=container.memory,
        ephemeral_storage=container.ephemeral_storage,
        shm=container.shm,
        volumes=[dict(v) for v in container.volumes],
        env_from_secrets=list(container.env_from_secrets),
        image_pull_secrets=list(container.image_pull_secrets),
        ports=ports,
        probes=probes,
        submitted_by=actor,
    )
    audited = {
        **audit.snapshot(workload, ["name", "kind", "image", "priority_class", "state"]),
        "resources": workload.resources,
        "replicas": held_pods,
        "autoscaling": workload.autoscaling,
        "topology": topology,
        "ports": ports,
        "probes": probes,
        **audit.snapshot(workload, list(POD_SPEC_FIELDS)),
    }
    with transaction.atomic():
        # The tenant row serialises admissions of one tenant: two submits cannot both take
        # the last free unit, nor the same name.
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        if not tenant.is_active:
            raise InvalidTransition(f"{tenant.slug} is {tenant.status}: nothing can run")
        hooks.workload_admission(tenant)  # metering's budget check (portal/wiring.py)
        # A statement of its own, after the lock's: it reads what the submit that held the
        # lock before this one committed (READ COMMITTED takes a snapshot per statement).
        name_taken, granted_by_class, workload.pk = admission.admission_reads(tenant, name, asked)
        admission.check_team(
            bad,
            tenant,
            ask,
            resolved,
            name_taken=name_taken,
            granted_by_class=granted_by_class,
        )
        bad.raise_any()
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


def cancel_workload(*, actor, workload: Workload, for_workspace: bool = False) -> Workload:
    """Cancel in one transaction: check, change state, audit; the cluster object is deleted by
    a task queued only when that transaction commits (a refused cancel queues nothing)."""
    require_role(actor, workload.tenant, WRITE_ROLES, "cancel workloads")
    refuse_a_workspace_run(workload, "stop", for_workspace=for_workspace)
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
