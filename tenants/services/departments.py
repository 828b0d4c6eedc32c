"""Departments: the platform team creates them, sets their quota, limits, envelope and admins,
and puts teams in them; the department's admins approve their teams' asks within its quota.
Every change is audited and, after commit, the cluster's cohorts are reconciled."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from catalog import slices
from catalog.models import ResourceClass
from core import audit
from core.errors import Forbidden, InvalidInput
from core.permissions import is_platform_admin, require_platform_admin
from tenants import capacity_time, department_rules, hooks, policy
from tenants.capacity_time import Window
from tenants.models import (
    AutoApprovalRule,
    Department,
    DepartmentEnvelope,
    DepartmentQuota,
    QuotaGrant,
    Tenant,
)
from tenants.services.capacity import grant_holds

DEPARTMENT_FIELDS = ["slug", "name", "cost_centre", "monthly_budget", "auto_approve"]
EDITABLE = ("name", "cost_centre", "monthly_budget", "auto_approve")


def _changed() -> None:
    """After commit, the cohorts and every team's queue follow (a hint: the periodic
    reconcile heals a lost one)."""
    transaction.on_commit(hooks.departments_changed)


def is_department_admin(user, department: Department | None) -> bool:
    if department is None or not getattr(user, "is_authenticated", False):
        return False
    return department.admins.filter(pk=user.pk).exists()


def can_see_department_spend(user, department: Department) -> bool:
    """Its admins and platform admins: its teams' members see the department, not what the
    other teams cost."""
    return is_platform_admin(user) or is_department_admin(user, department)


def require_approver(actor, tenant: Tenant, doing: str) -> Department | None:
    """Who may decide a team's asks: a platform admin (returns None: no department bound), or
    an admin of the team's department (returns it: its quota bounds what they approve)."""
    if is_platform_admin(actor):
        return None
    department = tenant.department
    if is_department_admin(actor, department):
        return department
    if department is not None:
        raise Forbidden(f"only platform admins or the admins of {department.slug} may {doing}")
    raise Forbidden(f"only platform admins may {doing}")


# --- quota --------------------------------------------------------------------------------


def held_slices(
    department_id: int,
    now: datetime,
    *,
    except_grant=None,
    window: Window | None = None,
) -> dict[str, int]:
    """GPU model -> the most slices its teams hold at any instant of `window` (from now on
    when none) in grants, but for `except_grant`: the quota is a limit at every instant."""
    window = window or Window(now)
    grants = QuotaGrant.objects.filter(tenant__department_id=department_id).exclude(pk=except_grant)
    holds = grant_holds(grants, window)
    classes = ResourceClass.objects.in_bulk({h.key for h in holds})
    as_slices = [
        replace(
            h,
            key=classes[h.key].gpu_model,
            amount=slices.slices_per_unit(classes[h.key]) * h.amount,
        )
        for h in holds
    ]
    return {
        str(model): int(peak)
        for model, peak in capacity_time.peaks(as_slices, window.starts_at, window.ends_at).items()
    }


def quota_of(department: Department) -> dict[str, int]:
    return {q.gpu_model: q.slices for q in department.quotas.all()}


def overruns(
    department: Department, items, now: datetime, window: Window | None = None
) -> list[str]:
    """Why these (resource class, units) do not fit the department's quota at every instant of
    `window` (empty: they do)."""
    return department_rules.quota_overruns(
        department.slug,
        quota_of(department),
        held_slices(department.pk, now, window=window),
        department_rules.slices_by_model(items),
    )


def check_department_quota(
    department: Department, items, now: datetime, window: Window | None = None
) -> None:
    """A department admin's approval: inside the quota, or a 403 that says who may go above."""
    reasons = overruns(department, items, now, window)
    if reasons:
        raise Forbidden(
            "; ".join(reasons) + f". A department admin approves only within {department.slug}'s "
            "quota: a platform admin must approve this ask, or raise the department's quota"
        )


def lock_department(department_id: int) -> Department:
    """Last in the lock order (pools, tenant, request, grants, then the department): two
    approvals in one department cannot both see its quota free."""
    return Department.objects.select_for_update().get(pk=department_id)


def team_envelopes(tenant: Tenant, classes) -> dict[str, policy.Envelope]:
    """The auto-approval envelope of each of these classes for `tenant`: the platform's rule,
    replaced class by class by the envelope of the team's department where it sets one."""
    envelopes = {
        r.resource_class.slug: policy.Envelope(r.max_amount, r.max_duration_hours)
        for r in AutoApprovalRule.objects.filter(resource_class__in=classes).select_related(
            "resource_class"
        )
    }
    if tenant.department_id is not None:
        own = DepartmentEnvelope.objects.filter(
            department_id=tenant.department_id, resource_class__in=classes
        ).select_related("resource_class")
        envelopes |= {
            e.resource_class.slug: policy.Envelope(e.max_amount, e.max_duration_hours) for e in own
        }
    return envelopes


def with_department_rules(
    decision: policy.Decision,
    tenant: Tenant,
    items,
    now: datetime,
    *,
    extends: QuotaGrant | None = None,
    window: Window | None = None,
) -> policy.Decision:
    """The policy's `decision` on an ask of `tenant`, with its department's rules added: its
    admins decide every ask when it has auto-approval off, and what its teams hold must stay
    inside its quota. A renewal (`extends`) adds no slices but keeps its grant's held longer,
    so it is measured against what the other grants hold."""
    department = tenant.department if tenant.department_id else None
    if department is None:
        return decision
    reasons = list(decision.reasons)
    if not department.auto_approve:
        reasons.append(f"{department.slug}'s admins decide every ask of its teams")
    held = held_slices(
        department.pk, now, except_grant=extends.pk if extends else None, window=window
    )
    reasons += department_rules.quota_overruns(
        department.slug,
        quota_of(department),
        held,
        department_rules.slices_by_model(items),
        renewal=extends is not None,
    )
    return policy.Decision(auto_approve=not reasons, reasons=reasons)


# --- the platform team's changes -------------------------------------------------------------


def _validated(department: Department) -> None:
    try:
        department.full_clean(exclude=["admins"])
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise InvalidInput(" ".join(messages), field=field) from None


def create_department(*, actor, slug: str, name: str, **fields) -> Department:
    require_platform_admin(actor, "create departments")
    department = Department(
        slug=slug, name=name, **{k: fields[k] for k in EDITABLE if k in fields and k != "name"}
    )
    _validated(department)
    with transaction.atomic():
        try:
            with transaction.atomic():
                department.save()
        except IntegrityError:
            raise InvalidInput(f"a department {slug!r} exists already", field="slug") from None
        audit.record(
            actor=actor,
            verb="department.created",
            obj=department,
            tenant=None,
            after=audit.snapshot(department, DEPARTMENT_FIELDS),
        )
    return department


def update_department(*, actor, department: Department, **fields) -> Department:
    require_platform_admin(actor, "change departments")
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise InvalidInput(f"cannot change {', '.join(sorted(unknown))}", field=min(unknown))
    with transaction.atomic():
        department = lock_department(department.pk)
        before = audit.snapshot(department, DEPARTMENT_FIELDS)
        for key, value in fields.items():
            setattr(department, key, value)
        _validated(department)
        department.save()
        audit.record(
            actor=actor,
            verb="department.updated",
            obj=department,
            tenant=None,
            before=before,
            after=audit.snapshot(department, DEPARTMENT_FIELDS),
        )
    return department


def delete_department(*, actor, department: Department) -> None:
    """Its teams stay, at the top level; the reconcile removes its Cohort."""
    require_platform_admin(actor, "delete departments")
    with transaction.atomic():
        department = lock_department(department.pk)
        teams = sorted(department.teams.values_list("slug", flat=True))
        before = {**audit.snapshot(department, DEPARTMENT_FIELDS), "teams": teams}
        audit.record(
            actor=actor, verb="department.deleted", obj=department, tenant=None, before=before
        )
        department.delete()
        _changed()


def _known_model(gpu_model: str) -> str:
    models = set(ResourceClass.objects.filter(active=True).values_list("gpu_model", flat=True))
    if gpu_model not in models:
        known = ", ".join(sorted(models)) or "none"
        raise InvalidInput(f"unknown GPU model {gpu_model!r}; known: {known}", field="gpu_model")
    return gpu_model


def _count(value, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{field} must be a whole number of slices, 0 or more", field=field)
    return value


def set_department_quota(
    *,
    actor,
    department: Department,
    gpu_model: str,
    slices: int,
    lending_limit: int | None = None,
    borrowing_limit: int | None = None,
) -> DepartmentQuota | None:
    """Set (or, at 0 slices with no limits, remove) the department's quota of a GPU model.
    Never below what its teams hold: that would make their grants over quota."""
    require_platform_admin(actor, "set department quotas")
    _known_model(gpu_model)
    slices = _count(slices, "slices") or 0
    lending_limit = _count(lending_limit, "lending_limit")
    borrowing_limit = _count(borrowing_limit, "borrowing_limit")
    with transaction.atomic():
        department = lock_department(department.pk)
        held = held_slices(department.pk, timezone.now()).get(gpu_model, 0)
        if slices < held:
            raise InvalidInput(
                f"{department.slug}'s teams hold {held} slices of {gpu_model}: the quota cannot "
                f"be lower; end or revoke grants first",
                field="slices",
            )
        line = department.quotas.filter(gpu_model=gpu_model).first()
        fields = ["slices", "lending_limit", "borrowing_limit"]
        before = audit.snapshot(line, fields) if line else None
        if not slices and lending_limit is None and borrowing_limit is None:
            if line is not None:
                line.delete()
            line = None
        else:
            line, _ = DepartmentQuota.objects.update_or_create(
                department=department,
                gpu_model=gpu_model,
                defaults={
                    "slices": slices,
                    "lending_limit": lending_limit,
                    "borrowing_limit": borrowing_limit,
                },
            )
        audit.record(
            actor=actor,
            verb="department.quota_set",
            obj=department,
            tenant=None,
            before={"gpu_model": gpu_model, **(before or {})},
            after={"gpu_model": gpu_model, **(audit.snapshot(line, fields) if line else {})},
        )
        _changed()
    return line


def set_department_envelope(
    *, actor, department: Department, resource_class: str, max_amount: int | None, hours: int = 0
) -> None:
    """The department's own auto-approval envelope of a class (None: the platform's applies)."""
    require_platform_admin(actor, "set department envelopes")
    rc = ResourceClass.objects.filter(slug=resource_class, active=True).first()
    if rc is None:
        raise InvalidInput(f"unknown resource class {resource_class!r}", field="resource_class")
    with transaction.atomic():
        department = lock_department(department.pk)
        if max_amount is None:
            DepartmentEnvelope.objects.filter(department=department, resource_class=rc).delete()
        else:
            _count(max_amount, "max_amount")
            _count(hours, "max_duration_hours")
            DepartmentEnvelope.objects.update_or_create(
                department=department,
                resource_class=rc,
                defaults={"max_amount": max_amount, "max_duration_hours": hours},
            )
        audit.record(
            actor=actor,
            verb="department.envelope_set",
            obj=department,
            tenant=None,
            after={"resource_class": rc.slug, "max_amount": max_amount, "hours": hours},
        )


def set_department_admins(*, actor, department: Department, usernames: list[str]) -> None:
    require_platform_admin(actor, "choose department admins")
    users = list(get_user_model().objects.filter(username__in=usernames, is_active=True))
    missing = sorted(set(usernames) - {u.get_username() for u in users})
    if missing:
        raise InvalidInput(f"no active user {', '.join(missing)}", field="admins")
    with transaction.atomic():
        department = lock_department(department.pk)
        before = sorted(department.admins.values_list("username", flat=True))
        department.admins.set(users)
        audit.record(
            actor=actor,
            verb="department.admins_set",
            obj=department,
            tenant=None,
            before={"admins": before},
            after={"admins": sorted(usernames)},
        )


def assign_team(*, actor, tenant: Tenant, department: Department | None) -> Tenant:
    """Put a team in a department (None: at the top level). Its grants must fit the
    department's quota, as if its admins had approved them."""
    require_platform_admin(actor, "move teams between departments")
    now = timezone.now()
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)  # tenant, then department
        if department is not None:
            department = lock_department(department.pk)
            grants = QuotaGrant.objects.holding(now).filter(tenant=tenant)
            items = [(g.resource_class, g.amount) for g in grants.select_related("resource_class")]
            if tenant.department_id != department.pk:
                reasons = overruns(department, items, now)
                if reasons:
                    raise InvalidInput(
                        f"{tenant.slug}'s grants do not fit: " + "; ".join(reasons),
                        field="department",
                    )
        before = {"department": str(tenant.department) if tenant.department_id else None}
        tenant.department = department
        tenant.save(update_fields=["department"])
        audit.record(
            actor=actor,
            verb="tenant.department_set",
            obj=tenant,
            tenant=tenant,
            before=before,
            after={"department": department.slug if department else None},
        )
        _changed()
    return tenant


def department_use(department: Department, now: datetime | None = None) -> list[dict]:
    """Per GPU model: its quota, limits and what its teams hold (for the pages and the API)."""
    held = held_slices(department.pk, now or timezone.now())
    lines = {q.gpu_model: q for q in department.quotas.all()}
    return [
        {
            "gpu_model": model,
            "slices": lines[model].slices if model in lines else 0,
            "held": held.get(model, 0),
            "lending_limit": lines[model].lending_limit if model in lines else None,
            "borrowing_limit": lines[model].borrowing_limit if model in lines else None,
        }
        for model in sorted(set(lines) | set(held))
    ]
