"""Idle GPUs given back, the acting side: record what the decision (`idle.py`) said, warn the
owners, suspend a workload and resume it. Each step under the workload's row lock, audited and
on the workload's page in the same transaction, told through the notification layer; the patch
to the cluster comes last, so a refused patch rolls the rest back.

Suspending frees the quota and keeps the spec:
- a Job through Kueue, as the reclaim controller does (`queue/reclaim.py`): its Workload's
  `spec.active` goes false, Kueue evicts it, suspends the Job and releases its quota for the
  next workload in the queue; resuming sets it true and Kueue queues it again;
- a Deployment scaled to 0 (its pods go, Kueue's pod groups with them; an autoscaler leaves a
  Deployment at 0 alone); resuming scales it back to its replicas;
- work made outside the portal, by its kind (`kinds/owners.OWNER_KINDS`): a Job or a
  framework's job through Kueue as above, a Deployment or StatefulSet scaled to 0, a bare pod
  deleted (nothing of it can be kept; the notice says so).
A suspended workload stays `suspended` whatever the cluster shows until it is resumed (the
sync leaves it so, `sync.sync_workload`), or it ends (deleted, cancelled).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from core import audit
from core.errors import InvalidTransition
from scheduler.cluster.kube import KubeGateway, gateway
from scheduler.workloads.kinds import owners
from scheduler.workloads.kinds.manifests import KUEUE_JOB_UID_LABEL, Observation
from scheduler.workloads.lifecycle.idle import Action, Step
from scheduler.workloads.lifecycle.sync import change_state
from scheduler.workloads.models import Workload, WorkloadEvent, refuse_a_workspace_run
from tenants.notifications import notify
from tenants.permissions import WRITE_ROLES, require_role

log = logging.getLogger(__name__)

# On a Kueue Workload the portal deactivated for idleness: when (the reclaim controller's
# annotations are not there, so it never requeues it by itself).
IDLE_SUSPENDED_AT = "gpu-portal.io/idle-suspended-at"
IDLE_REASON = "IdleSuspended"
RESUME_HINT = "resume it from its page, the API or gpu-portal resume"


def record(workload_id: int, step: Step, now: datetime) -> None:
    """TRACK and CLEAR: the idle clock on the workload's row (no event: nothing happened yet;
    a warning withdrawn because the GPUs are used again is audited)."""
    with transaction.atomic():
        w = (
            Workload.objects.select_for_update(of=("self",))
            .select_related("tenant")
            .get(pk=workload_id)
        )
        if step.action == Action.TRACK:
            w.idle_since, w.idle_seen_at = step.idle_since, now
        elif step.action == Action.CLEAR:
            if w.idle_warned_at is not None:
                audit.record(
                    actor=None,
                    verb="workload.idle_cleared",
                    obj=w,
                    tenant=w.tenant,
                    before={"idle_since": str(w.idle_since), "warned_at": str(w.idle_warned_at)},
                    after={"idle_since": None},
                )
            w.idle_since = w.idle_seen_at = w.idle_warned_at = None
        w.save(update_fields=["idle_since", "idle_seen_at", "idle_warned_at", "updated_at"])


def _running_locked(workload_id: int) -> Workload | None:
    """The workload under its row lock (inside the caller's transaction), or None when it no
    longer runs: each step acts on what is true now, not on what the pass read."""
    w = (
        Workload.objects.select_for_update(of=("self",))  # its submitter may be none (kubectl)
        .select_related("tenant", "submitted_by")
        .get(pk=workload_id)
    )
    return w if w.state == Workload.State.RUNNING else None


def warn_idle(workload_id: int, step: Step, now: datetime) -> bool:
    """Warn the submitter and record it on the page and in the audit log; False when the
    workload no longer runs."""
    with transaction.atomic():
        w = _running_locked(workload_id)
        if w is None:
            return False
        w.idle_since, w.idle_seen_at, w.idle_warned_at = step.idle_since, now, now
        w.save(update_fields=["idle_since", "idle_seen_at", "idle_warned_at", "updated_at"])
        WorkloadEvent.objects.create(
            workload=w, state=w.state, reason="IdleWarning", message=step.why
        )
        audit.record(
            actor=None,
            verb="workload.idle_warned",
            obj=w,
            tenant=w.tenant,
            after={"idle_since": step.idle_since.isoformat() if step.idle_since else None},
        )
        notify(
            "workload.idle_warning",
            w.tenant,
            subject=f"[GPU Portal] {w.tenant.slug}/{w.name} holds GPUs it does not use",
            text=f"Workload {w.name} of {w.tenant.slug}: {step.why}.",
            data={"workload": w.pk, "name": w.name},
            person=w.submitted_by,
        )
    return True


def suspend_idle(kube: KubeGateway, workload_id: int, step: Step, now: datetime) -> bool:
    """Suspend a running workload that sat idle (see the module's docstring); False when it no
    longer runs or the cluster has nothing to suspend."""
    with transaction.atomic():
        w = _running_locked(workload_id)
        if w is None:
            return False
        message = f"{step.why}; {RESUME_HINT}"
        change_state(w.pk, Observation(Workload.State.SUSPENDED, IDLE_REASON, message))
        Workload.objects.filter(pk=w.pk).update(idle_seen_at=now)
        notify(
            "workload.idle_suspended",
            w.tenant,
            subject=f"[GPU Portal] {w.tenant.slug}/{w.name} suspended: its GPUs sat idle",
            text=f"Workload {w.name} of {w.tenant.slug} was {message}. Its GPUs went back to "
            "the team's queue; its spec is kept.",
            data={"workload": w.pk, "name": w.name},
            person=w.submitted_by,
        )
        if not _set_running(kube, w, False, now):
            transaction.set_rollback(True)
            return False
    log.info("suspended idle workload %s: %s", w.pk, step.why)
    return True


def resume_workload(
    *, actor, workload: Workload, kube: KubeGateway | None = None, for_workspace: bool = False
) -> Workload:
    """Put a suspended workload back: a job into its team's queue, a deployment to its
    replicas. Team members and owners; audited; refused unless it is suspended, and for a
    workspace's run unless the workspace's own service asks (`for_workspace`)."""
    require_role(actor, workload.tenant, WRITE_ROLES, "resume workloads")
    refuse_a_workspace_run(workload, "restart", for_workspace=for_workspace)
    with transaction.atomic():
        w = (
            Workload.objects.select_for_update(of=("self",))
            .select_related("tenant")
            .get(pk=workload.pk)
        )
        if w.state != Workload.State.SUSPENDED:
            raise InvalidTransition(
                f"workload {w.name} is {w.state}: only a suspended workload can be resumed"
            )
        now = timezone.now()
        state = Workload.State.QUEUED if w.kind == Workload.Kind.JOB else Workload.State.PENDING
        change_state(w.pk, Observation(state, "Resumed", f"resumed by {actor}"), actor=actor)
        Workload.objects.filter(pk=w.pk).update(
            resumed_at=now, idle_since=None, idle_seen_at=None, idle_warned_at=None
        )
        audit.record(
            actor=actor,
            verb="workload.resumed",
            obj=w,
            tenant=w.tenant,
            before={"state": Workload.State.SUSPENDED},
            after={"state": state},
        )
        if not _set_running(kube or gateway(), w, True, now):
            raise InvalidTransition(f"workload {w.name} is no longer on the cluster")
    return Workload.objects.get(pk=w.pk)


def _set_running(kube: KubeGateway, w: Workload, running: bool, now: datetime) -> bool:
    """The patch that suspends (running=False) or resumes a workload; False when its object
    (or, for a job, Kueue's Workload for it) is gone."""
    how = owners.OWNER_KINDS[w.owner_kind].suspend if w.owner_kind else ""
    if how == "delete":  # a bare pod made outside the portal keeps nothing: it goes
        return not running and kube.delete("Pod", w.k8s_name, w.namespace)
    if how == "scale" or (not how and w.kind == Workload.Kind.DEPLOYMENT):
        kind = w.owner_kind or "Deployment"
        if kube.get(kind, w.k8s_name, w.namespace) is None:
            return False
        replicas = w.replicas if running else 0
        kube.merge_patch(kind, w.k8s_name, {"spec": {"replicas": replicas}}, w.namespace)
        return True
    mine = [
        kw
        for kw in kube.list("KueueWorkload", w.namespace)
        if (kw["metadata"].get("labels") or {}).get(KUEUE_JOB_UID_LABEL) == w.k8s_uid
    ]
    if not mine:
        return False
    newest = max(mine, key=lambda kw: kw["metadata"].get("creationTimestamp") or "")
    kube.merge_patch(
        "KueueWorkload",
        newest["metadata"]["name"],
        {
            "metadata": {"annotations": {IDLE_SUSPENDED_AT: None if running else now.isoformat()}},
            "spec": {"active": running},
        },
        w.namespace,
    )
    return True
