"""Workspaces: open, stop and restart (every write here, audited in its transaction).

A run is a workload of kind `job` submitted through `scheduler.workloads.services` (grants,
budgets, the allow-list, priority classes, the team's Kueue queue), at the priority its opener
chooses, by default the lowest the team may use (issue 49, 6): Kueue's ClusterQueues preempt
within a team only what has lower priority, so a notebook at gpu-high takes the place of
teammates' gpu-low jobs, and one at gpu-low may be preempted by their gpu-high work. Borrowers
never preempt (`borrowWithinCohort: Never`) and only borrowed units are reclaimed, so the portal
admits workspaces only within the team's own grant (`_check_room`). Its time limit
is the run's maximum run time, enforced by Kueue (the smallest of it and the team's and pool's).
Its PersistentVolumeClaim, Service and server Secret are applied by a task on commit
(`sync.apply_objects`) and kept across stops; stopping cancels the run (its Job goes, its volume
stays); restart resumes a culled run or submits a new one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction

from catalog import slices
from catalog.models import ResourceClass
from core import audit
from core.errors import Forbidden, InvalidInput, InvalidTransition, QuotaExceeded, ServiceError
from core.permissions import require_platform_admin
from core.tasks import send_hint
from metering.idle_runs import IDLE_EXEMPT_LABEL
from scheduler.cluster.kube import KubeGateway
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import suspending
from scheduler.workloads.models import Workload
from scheduler.workloads.pages.choices import OWN, gpu_offer
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import QuotaGrant, Tenant
from tenants.models.priority_classes import CRITICAL_PRIORITY_CLASS, PRIORITY_CLASS_DEFS
from tenants.permissions import WRITE_ROLES, can_manage_members, require_role
from workspaces import input as checks
from workspaces import tasks
from workspaces.manifests import (
    HOMES,
    WORKSPACE_LABEL,
    claim_name,
    object_name,
    server_command,
    server_env,
)
from workspaces.models import Workspace, WorkspacePolicy
from workspaces.server_secret import new_secret, seal

AUDITED = ["name", "kind", "image", "resource_class", "home_size", "time_limit_s"]


class WorkspaceCapReached(QuotaExceeded):
    code = "workspace_cap"


def max_per_person(tenant: Tenant) -> int:
    policy = WorkspacePolicy.objects.filter(tenant=tenant).first()
    return policy.max_per_person if policy else settings.WORKSPACE_MAX_PER_PERSON


def workspace_priorities(tenant: Tenant) -> list[str]:
    """The classes a workspace may run at: the team's, below the critical one (capped for
    production inference), lowest first."""
    allowed = set(tenant.allowed_priority_classes or [])
    return [
        pc.name
        for pc in sorted(PRIORITY_CLASS_DEFS, key=lambda pc: pc.value)
        if pc.name != CRITICAL_PRIORITY_CLASS and pc.name in allowed
    ]


def workspace_priority(tenant: Tenant, asked: str | None = None) -> str:
    """The class a workspace runs at: the one asked, else the lowest the team may use (issue
    49, 6: a notebook at gpu-high preempts teammates' gpu-low jobs, so that is chosen, not
    given silently)."""
    offered = workspace_priorities(tenant)
    if asked:
        if asked not in offered:
            raise InvalidInput(
                f"a workspace of {tenant.slug} runs at {' or '.join(offered) or 'no class'}, "
                f"not {asked!r}",
                field="priority",
            )
        return asked
    if offered:
        return offered[0]
    raise InvalidInput(
        f"{tenant.slug} may use no priority class a workspace runs at; a platform admin must "
        "allow gpu-high or gpu-low",
        field="priority",
    )


def _granted(tenant: Tenant, rc: ResourceClass, grants: list[QuotaGrant] | None = None) -> int:
    """The team's own grant that covers `rc`: in slices, every grant of its GPU model.
    `grants`: the team's effective grants, when the caller read them already."""
    if grants is None:
        grants = list(
            QuotaGrant.objects.effective().filter(tenant=tenant).select_related("resource_class")
        )
    if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES:
        return sum(
            g.amount * slices.slices_per_unit(g.resource_class)
            for g in grants
            if g.resource_class.gpu_model == rc.gpu_model
        )
    return sum(g.amount for g in grants if g.resource_class_id == rc.pk)


def _units(rc: ResourceClass) -> int:
    return slices.slices_per_unit(rc) if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES else 1


def covered_classes(tenant: Tenant) -> list[ResourceClass]:
    """The active classes of which the team's own grants cover one workspace: the form's
    choices, and what a refusal names. One read of the grants for all of them."""
    grants = list(
        QuotaGrant.objects.effective().filter(tenant=tenant).select_related("resource_class")
    )
    return [
        c
        for c in ResourceClass.objects.filter(active=True).order_by("slug")
        if _granted(tenant, c, grants) >= _units(c)
    ]


def class_choices(tenant: Tenant) -> list[tuple[str, str]]:
    """The form's GPU picker: (slug, label) of each class a workspace may open on, with what
    the team has free, smallest first (the first is the default: the smallest granted slice),
    in the words of the submit form's picker."""
    covered = {c.slug for c in covered_classes(tenant)}
    return [
        (c.rc.slug, c.label) for c in gpu_offer(tenant) if c.source == OWN and c.rc.slug in covered
    ]


def granted_class(tenant: Tenant, slug: str) -> ResourceClass:
    """The asked class, when the team's grant covers one unit of it (else a 400 naming the
    ones it may use)."""
    covered = covered_classes(tenant)
    rc = next((c for c in covered if c.slug == slug), None)
    if rc is None:
        names = ", ".join(c.slug for c in covered) or "none: ask for capacity first"
        raise InvalidInput(
            f"{tenant.slug} has no grant for {slug!r}; open the workspace on a class its grants "
            f"cover ({names})",
            field="resource_class",
            code="no_grant",
        )
    return rc


def _check_cap_and_room(tenant: Tenant, owner, rc: ResourceClass, *, but: int | None) -> None:
    """Under the tenant's lock: the person's cap (409) and the team's own grant (409), counting
    the workspaces that hold a GPU now, except `but` (the one restarting)."""
    holding = [
        ws
        for ws in Workspace.objects.filter(tenant=tenant).select_related("run")
        if ws.holds_gpu and ws.pk != but
    ]
    cap = max_per_person(tenant)
    mine = [ws.name for ws in holding if ws.owner_id == owner.pk]
    if len(mine) >= cap:
        raise WorkspaceCapReached(
            f"{owner} already holds {len(mine)} running workspace(s) in {tenant.slug} "
            f"({', '.join(sorted(mine))}) and the team's cap is {cap} per person: stop one first",
            field="name",
        )
    classes = {
        c.slug: c
        for c in ResourceClass.objects.filter(slug__in={w.resource_class for w in holding})
    }
    same = [
        c for w in holding if (c := classes.get(w.resource_class)) and c.gpu_model == rc.gpu_model
    ]
    if settings.GPU_QUOTA_UNIT != slices.UNIT_SLICES:
        same = [c for c in same if c.pk == rc.pk]
    used = sum(_units(c) for c in same)
    granted = _granted(tenant, rc)
    if used + _units(rc) > granted:
        raise QuotaExceeded(
            f"workspaces run only within {tenant.slug}'s own grant (never on borrowed GPUs, so "
            f"nothing preempts them): {used} of {granted} are held by workspaces, this needs "
            f"{_units(rc)}; stop a workspace or ask for more",
            field="resource_class",
        )


def _check_all(**checks_by_field: Callable[[], Any]) -> dict[str, Any]:
    """Every check of an opened workspace in one pass (issue 49, 6: the form says every bad
    field in one round, each at its own): their values by field, or one refusal as it was
    raised (its code kept), or one InvalidInput naming every refused field."""
    values: dict[str, Any] = {}
    refused: list[tuple[str, ServiceError]] = []
    for field, check in checks_by_field.items():
        try:
            values[field] = check()
        except InvalidInput as exc:
            refused.append((exc.field or field, exc))
    if len(refused) == 1:
        raise refused[0][1]
    if refused:
        every = InvalidInput.of_fields({field: [exc.detail] for field, exc in refused})
        every.refused = list(refused)
        raise every
    return values


def _start_run(actor, ws: Workspace, rc: ResourceClass, priority: str) -> Workload:
    """Submit the run (inside the caller's transaction; created in the cluster on commit)."""
    home = HOMES[ws.kind]
    command, args = server_command(ws.kind, ws.tenant.namespace, ws.name)
    run = workloads.submit_workload(
        actor=actor,
        tenant=ws.tenant,
        spec=workload_spec(
            name=object_name(ws.name),
            kind=Workload.Kind.JOB,
            image=ws.image,
            resources={rc.slug: 1},
            priority=priority,
            command=command,
            args=args,
            env={"HOME": home, **server_env(ws.kind, ws.name)},
            volumes=[{"claim": claim_name(ws.name), "mount_path": home}],
        ),
        check_references=False,  # its home claim is the portal's, made as the run starts
    )
    # The portal's own labels (a member may not set them): the Service selects the pod by the
    # first, the generic idle pass leaves workspaces to the culling pass (the second). The
    # run's time limit is the workspace's, within what the team and pool allow.
    limit = min(ws.time_limit_s, run.max_run_s or ws.time_limit_s)
    Workload.objects.filter(pk=run.pk).update(
        labels={WORKSPACE_LABEL: str(ws.pk), IDLE_EXEMPT_LABEL: "true"}, max_run_s=limit
    )
    ws.run = run
    ws.runs += 1
    ws.save(update_fields=["run", "runs"])
    return run


def _enqueue_apply(workspace_id: int) -> None:
    # the next restart applies them again whatever a lost message left
    send_hint(tasks.apply_workspace, f"workspace {workspace_id}", workspace_id=workspace_id)


def open_workspace(  # noqa: PLR0913 (the form's and the API's fields, by keyword)
    *,
    actor,
    tenant: Tenant,
    name,
    kind,
    image,
    resource_class,
    time_limit_h,
    home_size=None,
    priority=None,
) -> Workspace:
    require_role(actor, tenant, WRITE_ROLES, "open workspaces")
    checked = _check_all(
        name=lambda: checks.check_name(name),
        kind=lambda: checks.check_kind(kind),
        image=lambda: checks.check_workspace_image(image),
        time_limit_h=lambda: checks.check_time_limit(time_limit_h),
        home_size=lambda: checks.check_home_size(home_size or settings.WORKSPACE_HOME_SIZE),
        resource_class=lambda: granted_class(
            tenant, resource_class if isinstance(resource_class, str) else ""
        ),
        priority=lambda: workspace_priority(
            tenant, priority if isinstance(priority, str) else None
        ),
    )
    name, kind, image = checked["name"], checked["kind"], checked["image"]
    limit_s, home_size = checked["time_limit_h"], checked["home_size"]
    rc, priority = checked["resource_class"], checked["priority"]
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        if Workspace.objects.filter(tenant=tenant, name=name).exists():
            raise InvalidInput(
                f"{tenant.slug} already has a workspace named {name!r}: pick another name, or "
                "restart that one from its page",
                field="name",
            )
        _check_cap_and_room(tenant, actor, rc, but=None)
        ws = Workspace.objects.create(
            tenant=tenant,
            owner=actor,
            name=name,
            kind=kind,
            image=image,
            resource_class=rc.slug,
            home_size=home_size,
            time_limit_s=limit_s,
            server_secret_sealed=seal(new_secret(kind)),
        )
        _start_run(actor, ws, rc, priority)
        audit.record(
            actor=actor,
            verb="workspace.opened",
            obj=ws,
            tenant=tenant,
            after=audit.snapshot(ws, AUDITED),
        )
        ws_id = ws.pk
        transaction.on_commit(lambda: _enqueue_apply(ws_id))
    return ws


def _require_holder(actor, ws: Workspace, doing: str) -> None:
    """Its owner, the team's owners and platform admins."""
    require_role(actor, ws.tenant, WRITE_ROLES, doing)
    if actor.pk != ws.owner_id and not can_manage_members(actor, ws.tenant):
        raise Forbidden(f"only {ws.owner} or the team's owners may {doing} {ws.name}")


def stop_workspace(*, actor, workspace: Workspace) -> Workspace:
    """Cancel the run (its Job is deleted on commit); the home volume, Service and Secret stay."""
    _require_holder(actor, workspace, "stop")
    with transaction.atomic():
        ws = (
            Workspace.objects.select_for_update(of=("self",))
            .select_related("run", "tenant")
            .get(pk=workspace.pk)
        )
        run = ws.run
        if run is None or run.is_final:
            raise InvalidTransition(f"workspace {ws.name} is already stopped")
        workloads.cancel_workload(actor=actor, workload=run, for_workspace=True)
        audit.record(
            actor=actor, verb="workspace.stopped", obj=ws, tenant=ws.tenant, after={"run": run.pk}
        )
    return Workspace.objects.select_related("run").get(pk=ws.pk)


def restart_workspace(*, actor, workspace: Workspace, kube: KubeGateway | None = None) -> Workspace:
    """One click back: a culled (suspended) run is resumed in its team's queue; an ended one is
    followed by a new run on the same volume."""
    _require_holder(actor, workspace, "restart")
    rc = granted_class(workspace.tenant, workspace.resource_class)
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=workspace.tenant_id)
        ws = (
            Workspace.objects.select_for_update(of=("self",))
            .select_related("run")
            .get(pk=workspace.pk)
        )
        if ws.holds_gpu:
            raise InvalidTransition(f"workspace {ws.name} is {ws.state}: stop it first")
        _check_cap_and_room(tenant, ws.owner, rc, but=ws.pk)
        run = ws.run
        if run is not None and run.state == Workload.State.SUSPENDED:
            suspending.resume_workload(actor=actor, workload=run, kube=kube, for_workspace=True)
            how = "resumed"
        else:
            # at the class its last run was chosen at, while the team may still use it
            last = run.priority_class if run is not None else None
            keep = last if last in workspace_priorities(tenant) else None
            run = _start_run(actor, ws, rc, workspace_priority(tenant, keep))
            how = "new run"
        audit.record(
            actor=actor,
            verb="workspace.restarted",
            obj=ws,
            tenant=tenant,
            after={"run": run.pk, "how": how},
        )
        ws_id = ws.pk
        transaction.on_commit(lambda: _enqueue_apply(ws_id))
    return Workspace.objects.select_related("run").get(pk=ws.pk)


def set_workspace_policy(
    *, actor, tenant: Tenant, max_per_person: int, idle_after_s: int | None = None
) -> WorkspacePolicy:
    """A team's cap per person and idle time (platform admins; audited)."""
    require_platform_admin(actor, "set a team's workspace policy")
    if (
        isinstance(max_per_person, bool)
        or not isinstance(max_per_person, int)
        or not 0 <= max_per_person <= 20
    ):
        raise InvalidInput("max per person: a whole number from 0 to 20", field="max_per_person")
    if (
        idle_after_s is not None
        and not settings.WORKSPACE_MIN_IDLE_AFTER_S <= idle_after_s <= 86400
    ):
        raise InvalidInput(
            f"idle after: between {settings.WORKSPACE_MIN_IDLE_AFTER_S} s and 1 day, or empty",
            field="idle_after_s",
        )
    with transaction.atomic():
        before = WorkspacePolicy.objects.select_for_update().filter(tenant=tenant).first()
        policy, _ = WorkspacePolicy.objects.update_or_create(
            tenant=tenant,
            defaults={"max_per_person": max_per_person, "idle_after_s": idle_after_s},
        )
        fields = ["max_per_person", "idle_after_s"]
        audit.record(
            actor=actor,
            verb="workspace_policy.set",
            obj=policy,
            tenant=tenant,
            before=audit.snapshot(before, fields) if before else None,
            after=audit.snapshot(policy, fields),
        )
    return policy
