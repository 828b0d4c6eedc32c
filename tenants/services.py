"""Every write of the governance core: one function per use case, each under one transaction
that checks permission, locks rows in a fixed order (pools, then tenant, then request), changes
state, writes exactly one audit event per state change and queues follow-up work on commit."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from scheduler.models import Pool, ResourceClass
from tenants import audit, policy
from tenants.exceptions import (
    CapacityExceeded,
    Forbidden,
    InvalidInput,
    InvalidTransition,
    QuotaExceeded,
)
from tenants.models import (
    PRIORITY_CLASSES,
    ApiToken,
    AutoApprovalRule,
    CapacityRequest,
    CapacityRequestItem,
    Membership,
    QuotaGrant,
    Tenant,
    dns_label,
    is_platform_admin,
)
from tenants.permissions import OWNER_ROLES, WRITE_ROLES, require_platform_admin, require_role
from tenants.signals import desired_state_changed

User = get_user_model()

REQUEST_FIELDS = ["state", "starts_at", "ends_at", "decided_by", "decision_comment"]
TENANT_FIELDS = ["slug", "name", "status", "cost_centre", "gpu_ceiling", "monthly_budget"]
GRANT_FIELDS = ["resource_class", "amount", "starts_at", "ends_at", "state"]


def _notify_desired_state_changed(tenant: Tenant) -> None:
    """After commit, tell the reconciler (a hint: the periodic reconcile heals a lost one)."""
    tenant_id = tenant.pk
    transaction.on_commit(lambda: desired_state_changed.send(Tenant, tenant_id=tenant_id))


# --- tenants and members -------------------------------------------------------------------


def create_tenant(
    *,
    actor,
    slug: str,
    name: str,
    cost_centre: str = "",
    gpu_ceiling: Decimal | None = None,
    monthly_budget: Decimal | None = None,
    allowed_priority_classes: list[str] | None = None,
) -> Tenant:
    require_platform_admin(actor, "create tenants")
    slug = (slug or "").strip()
    try:
        dns_label(slug)
    except ValidationError as exc:
        raise InvalidInput(f"slug {slug!r}: {exc.messages[0]}", field="slug") from None
    if not name.strip():
        raise InvalidInput("name must not be empty", field="name")
    allowed = allowed_priority_classes or ["gpu-high", "gpu-low"]
    unknown = set(allowed) - set(PRIORITY_CLASSES)
    if unknown:
        raise InvalidInput(
            f"unknown priority classes {sorted(unknown)}; choose from {list(PRIORITY_CLASSES)}",
            field="allowed_priority_classes",
        )
    with transaction.atomic():
        if Tenant.objects.filter(slug=slug).exists():
            raise InvalidInput(f"a tenant {slug!r} exists already", field="slug")
        robot = User.objects.create_user(username=f"robot-{slug}", is_active=True)
        robot.set_unusable_password()
        robot.save(update_fields=["password"])
        tenant = Tenant.objects.create(
            slug=slug,
            name=name.strip(),
            cost_centre=cost_centre,
            gpu_ceiling=gpu_ceiling,
            monthly_budget=monthly_budget,
            allowed_priority_classes=allowed,
            robot=robot,
        )
        Membership.objects.create(tenant=tenant, user=robot, role=Membership.Role.MEMBER)
        audit.record(
            actor=actor,
            verb="tenant.created",
            obj=tenant,
            tenant=tenant,
            after=audit.snapshot(tenant, TENANT_FIELDS),
        )
        _notify_desired_state_changed(tenant)
    return tenant


EDITABLE_TENANT_FIELDS = {
    "name",
    "cost_centre",
    "gpu_ceiling",
    "monthly_budget",
    "allowed_priority_classes",
    "critical_gpu_quota",
}


def update_tenant(*, actor, tenant: Tenant, **changes) -> Tenant:
    require_platform_admin(actor, "edit tenants")
    unknown = set(changes) - EDITABLE_TENANT_FIELDS
    if unknown:
        raise InvalidInput(f"cannot change {sorted(unknown)} here")
    bad = set(changes.get("allowed_priority_classes") or []) - set(PRIORITY_CLASSES)
    if bad:
        raise InvalidInput(
            f"unknown priority classes {sorted(bad)}", field="allowed_priority_classes"
        )
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        before = audit.snapshot(tenant, sorted(changes))
        for name, value in changes.items():
            setattr(tenant, name, value)
        tenant.save(update_fields=sorted(changes))
        audit.record(
            actor=actor,
            verb="tenant.edited",
            obj=tenant,
            tenant=tenant,
            before=before,
            after=audit.snapshot(tenant, sorted(changes)),
        )
        _notify_desired_state_changed(tenant)
    return tenant


def change_tenant_status(*, actor, tenant: Tenant, action: str) -> Tenant:
    """`suspend`, `resume` or `archive` a tenant."""
    require_platform_admin(actor, f"{action} tenants")
    if action not in Tenant._transitions:
        raise InvalidInput(f"unknown action {action!r}; use suspend, resume or archive")
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        before = audit.snapshot(tenant, ["status"])
        tenant.transition(action)
        tenant.save(update_fields=["status"])
        if action == "archive":
            # An archived tenant holds nothing: its grants end with it.
            now = timezone.now()
            for grant in QuotaGrant.objects.select_for_update().holding(now).filter(tenant=tenant):
                grant.end(QuotaGrant.State.REVOKED, now)
                grant.save(update_fields=["state", "ended_at"])
        audit.record(
            actor=actor,
            verb=f"tenant.{tenant.status}",
            obj=tenant,
            tenant=tenant,
            before=before,
            after=audit.snapshot(tenant, ["status"]),
        )
        _notify_desired_state_changed(tenant)
    return tenant


def _check_role(role: str) -> None:
    if role not in Membership.Role.values:
        raise InvalidInput(
            f"unknown role {role!r}; choose from {', '.join(Membership.Role.values)}",
            field="role",
        )


def add_member(*, actor, tenant: Tenant, username: str, role: str) -> Membership:
    require_role(actor, tenant, OWNER_ROLES, "add members")
    _check_role(role)
    user = User.objects.filter(username=username).first()
    if user is None:
        raise InvalidInput(f"no user {username!r}", field="username")
    with transaction.atomic():
        if Membership.objects.filter(tenant=tenant, user=user).exists():
            raise InvalidInput(f"{username} is already in {tenant.slug}", field="username")
        membership = Membership.objects.create(tenant=tenant, user=user, role=role)
        audit.record(
            actor=actor,
            verb="membership.added",
            obj=membership,
            tenant=tenant,
            after={"user": username, "role": role},
        )
        _notify_desired_state_changed(tenant)
    return membership


def _refuse_last_owner(membership: Membership, new_role: str | None) -> None:
    if membership.role != Membership.Role.OWNER or new_role == Membership.Role.OWNER:
        return
    owners = Membership.objects.filter(tenant=membership.tenant, role=Membership.Role.OWNER)
    if owners.count() <= 1:
        raise InvalidInput(
            f"{membership.user.get_username()} is the last owner of {membership.tenant.slug}; "
            "make someone else owner first",
            field="role",
        )


def change_member_role(*, actor, membership: Membership, role: str) -> Membership:
    require_role(actor, membership.tenant, OWNER_ROLES, "change roles")
    _check_role(role)
    with transaction.atomic():
        membership = Membership.objects.select_for_update().get(pk=membership.pk)
        _refuse_last_owner(membership, role)
        before = {"role": membership.role}
        membership.role = role
        membership.save(update_fields=["role"])
        audit.record(
            actor=actor,
            verb="membership.changed",
            obj=membership,
            tenant=membership.tenant,
            before=before,
            after={"role": role},
        )
        _notify_desired_state_changed(membership.tenant)
    return membership


def remove_member(*, actor, membership: Membership) -> None:
    require_role(actor, membership.tenant, OWNER_ROLES, "remove members")
    with transaction.atomic():
        membership = Membership.objects.select_for_update().get(pk=membership.pk)
        _refuse_last_owner(membership, None)
        tenant = membership.tenant
        audit.record(
            actor=actor,
            verb="membership.removed",
            obj=membership,
            tenant=tenant,
            before={"user": membership.user.get_username(), "role": membership.role},
        )
        membership.delete()
        _notify_desired_state_changed(tenant)


# --- capacity: validation and the capacity check -------------------------------------------


def _resolve_items(items: Mapping) -> list[tuple[ResourceClass, int]]:
    if not items:
        raise InvalidInput("ask for at least one resource class", field="items")
    resolved: list[tuple[ResourceClass, int]] = []
    slugs = [k.slug if isinstance(k, ResourceClass) else str(k) for k in items]
    known = {rc.slug: rc for rc in ResourceClass.objects.filter(slug__in=slugs, active=True)}
    for key, amount in items.items():
        slug = key.slug if isinstance(key, ResourceClass) else str(key)
        if slug not in known:
            raise InvalidInput(
                f"unknown resource class {slug!r}; see /api/v1/resource-classes/", field="items"
            )
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise InvalidInput(f"{slug}: amount must be a whole number", field="items")
        if amount <= 0:
            raise InvalidInput(f"{slug}: amount must be at least 1, not {amount}", field="items")
        resolved.append((known[slug], amount))
    return resolved


def _check_dates(starts_at: datetime, ends_at: datetime | None, now: datetime) -> None:
    if starts_at < now - timedelta(minutes=5):
        raise InvalidInput("start must not be in the past", field="starts_at")
    if ends_at is not None:
        if ends_at <= now:
            raise InvalidInput("end must be in the future", field="ends_at")
        if ends_at <= starts_at:
            raise InvalidInput("end must be after the start", field="ends_at")


def _granted(resource_class_id: int, now: datetime) -> int:
    total = (
        QuotaGrant.objects.holding(now)
        .filter(resource_class_id=resource_class_id)
        .aggregate(total=Sum("amount"))["total"]
    )
    return total or 0


def free_capacity(resource_class: ResourceClass, now: datetime | None = None) -> int:
    """Units approvals may still hand out (read without a lock: for display and early checks)."""
    pool = Pool.objects.filter(resource_class=resource_class).first()
    grantable = pool.grantable if pool else 0
    return max(0, grantable - _granted(resource_class.pk, now or timezone.now()))


def _tenant_gpu_equivalents(tenant: Tenant, now: datetime) -> Decimal:
    total = Decimal(0)
    rows = (
        QuotaGrant.objects.holding(now)
        .filter(tenant=tenant)
        .values("resource_class__gpu_fraction")
        .annotate(n=Sum("amount"))
    )
    for row in rows:
        total += row["resource_class__gpu_fraction"] * row["n"]
    return total


def _check_ceiling(tenant: Tenant, items: list[tuple[ResourceClass, int]], now: datetime) -> None:
    if tenant.gpu_ceiling is None:
        return
    held = _tenant_gpu_equivalents(tenant, now)
    asked = sum((rc.gpu_fraction * n for rc, n in items), Decimal(0))
    if held + asked > tenant.gpu_ceiling:
        room = max(Decimal(0), tenant.gpu_ceiling - held)
        raise QuotaExceeded(
            f"{tenant.slug} may hold at most {tenant.gpu_ceiling:g} GPU-equivalents; it holds "
            f"{held:g} and this asks for {asked:g} more (room left: {room:g})",
            field="items",
        )


def _check_capacity(items: list[tuple[ResourceClass, int]], now: datetime, *, lock: bool) -> None:
    """Refuse when any class would be granted beyond capacity × overcommit. With lock=True the
    pool rows are locked in resource-class order, so concurrent approvals serialise and
    cannot deadlock; the check then holds until the transaction commits."""
    ids = sorted(rc.pk for rc, _ in items)
    pools_qs = Pool.objects.filter(resource_class_id__in=ids).order_by("resource_class_id")
    if lock:
        pools_qs = pools_qs.select_for_update()
    pools = {p.resource_class_id: p for p in pools_qs}
    for rc, amount in sorted(items, key=lambda i: i[0].pk):
        pool = pools.get(rc.pk)
        grantable = pool.grantable if pool else 0
        free = max(0, grantable - _granted(rc.pk, now))
        if amount > free:
            raise CapacityExceeded(
                f"{rc.slug}: asked for {amount} but only {free} of {grantable} can still be "
                f"granted; ask for {free} or fewer, or ask the platform team for more capacity",
                field="items",
            )


def _policy_decision(items, starts_at, ends_at) -> policy.Decision:
    rules = {
        r.resource_class.slug: policy.Envelope(r.max_amount, r.max_duration_hours)
        for r in AutoApprovalRule.objects.filter(
            resource_class__in=[rc for rc, _ in items]
        ).select_related("resource_class")
    }
    asked = [policy.AskedItem(rc.slug, n, rc.gpu_fraction) for rc, n in items]
    return policy.evaluate(asked, starts_at=starts_at, ends_at=ends_at, envelopes=rules)


def preview_capacity_request(*, tenant: Tenant, items: Mapping, starts_at=None, ends_at=None):
    """What would happen to this ask (for the form's live hint): policy decision and free units."""
    now = timezone.now()
    resolved = _resolve_items(items)
    decision = _policy_decision(resolved, starts_at or now, ends_at)
    return decision, {rc.slug: free_capacity(rc, now) for rc, _ in resolved}


# --- capacity requests ----------------------------------------------------------------------


def submit_capacity_request(
    *,
    actor,
    tenant: Tenant,
    items: Mapping,
    ends_at: datetime | None,
    justification: str,
    starts_at: datetime | None = None,
) -> CapacityRequest:
    """Ask for capacity. Inside the policy envelope it is approved at once (two audit events:
    submitted, then approved by the system); otherwise it waits for a platform admin."""
    require_role(actor, tenant, WRITE_ROLES, "ask for capacity")
    tenant.refresh_from_db(fields=["status"])
    if not tenant.is_active:
        raise InvalidInput(f"{tenant.slug} is {tenant.status}: it cannot ask for capacity")
    now = timezone.now()
    starts_at = starts_at or now
    _check_dates(starts_at, ends_at, now)
    if not (justification or "").strip():
        raise InvalidInput("say why the team needs this capacity", field="justification")
    resolved = _resolve_items(items)
    _check_ceiling(tenant, resolved, now)
    _check_capacity(resolved, now, lock=False)
    decision = _policy_decision(resolved, starts_at, ends_at)

    with transaction.atomic():
        request = CapacityRequest.objects.create(
            tenant=tenant,
            requester=actor,
            starts_at=starts_at,
            ends_at=ends_at,
            justification=justification.strip(),
            policy_reasons=decision.reasons,
        )
        CapacityRequestItem.objects.bulk_create(
            CapacityRequestItem(request=request, resource_class=rc, amount=n) for rc, n in resolved
        )
        audit.record(
            actor=actor,
            verb="capacity_request.submitted",
            obj=request,
            tenant=tenant,
            after={
                **audit.snapshot(request, REQUEST_FIELDS),
                "items": {rc.slug: n for rc, n in resolved},
                "policy": "auto-approve" if decision.auto_approve else decision.reasons,
            },
        )
    if decision.auto_approve:
        try:
            request = _approve(actor=None, request=request, comment="auto-approved by policy")
        except (CapacityExceeded, QuotaExceeded) as exc:
            # Someone took the last units between our check and now: leave it to a human.
            CapacityRequest.objects.filter(pk=request.pk).update(policy_reasons=[exc.detail])
            request.refresh_from_db()
    return request


def approve_capacity_request(
    *, actor, request: CapacityRequest, comment: str = ""
) -> CapacityRequest:
    require_platform_admin(actor, "approve capacity requests")
    return _approve(actor=actor, request=request, comment=comment)


def _approve(*, actor, request: CapacityRequest, comment: str) -> CapacityRequest:
    now = timezone.now()
    # Refuse a wrong state early and clearly; it is checked again under the lock below.
    CapacityRequest.objects.only("state").get(pk=request.pk).transition("approve")
    with transaction.atomic():
        items = [
            (i.resource_class, i.amount) for i in request.items.select_related("resource_class")
        ]
        _check_capacity(items, now, lock=True)  # locks pools first
        tenant = Tenant.objects.select_for_update().get(pk=request.tenant_id)
        request = CapacityRequest.objects.select_for_update().get(pk=request.pk)
        before = audit.snapshot(request, REQUEST_FIELDS)
        request.transition("approve")  # re-checked under the lock: no double approval
        if not tenant.is_active:
            raise InvalidTransition(f"{tenant.slug} is {tenant.status}: nothing can be approved")
        if request.ends_at is not None and request.ends_at <= now:
            raise InvalidTransition(f"request #{request.pk} ended before it was approved")
        _check_ceiling(tenant, items, now)
        request.auto_approved = actor is None
        request.decided_by = actor
        request.decided_at = now
        request.decision_comment = comment
        request.save()
        QuotaGrant.objects.bulk_create(
            QuotaGrant(
                tenant=tenant,
                resource_class=rc,
                amount=n,
                starts_at=max(request.starts_at, now),
                ends_at=request.ends_at,
                request=request,
                created_by=actor,
            )
            for rc, n in items
        )
        audit.record(
            actor=actor,
            verb="capacity_request.approved",
            obj=request,
            tenant=tenant,
            before=before,
            after=audit.snapshot(request, REQUEST_FIELDS),
        )
        _notify_desired_state_changed(tenant)
    return request


def _decide(*, actor, request: CapacityRequest, action: str, comment: str) -> CapacityRequest:
    with transaction.atomic():
        request = CapacityRequest.objects.select_for_update().get(pk=request.pk)
        before = audit.snapshot(request, REQUEST_FIELDS)
        was_holding = request.state in (
            CapacityRequest.State.APPROVED,
            CapacityRequest.State.PROVISIONED,
        )
        request.transition(action)
        request.decided_by = actor
        request.decided_at = timezone.now()
        request.decision_comment = comment
        request.save()
        if was_holding:
            for grant in request.grants.select_for_update().filter(state=QuotaGrant.State.ACTIVE):
                grant.end(QuotaGrant.State.REVOKED, request.decided_at)
                grant.save(update_fields=["state", "ended_at"])
            _notify_desired_state_changed(request.tenant)
        audit.record(
            actor=actor,
            verb=f"capacity_request.{request.state}",
            obj=request,
            tenant=request.tenant,
            before=before,
            after=audit.snapshot(request, REQUEST_FIELDS),
        )
    return request


def reject_capacity_request(*, actor, request: CapacityRequest, comment: str) -> CapacityRequest:
    require_platform_admin(actor, "reject capacity requests")
    if not (comment or "").strip():
        raise InvalidInput("say why the request is rejected", field="comment")
    return _decide(actor=actor, request=request, action="reject", comment=comment)


def cancel_capacity_request(
    *, actor, request: CapacityRequest, comment: str = ""
) -> CapacityRequest:
    """The requester, an owner or a platform admin withdraws an ask or gives capacity back."""
    if request.requester_id != getattr(actor, "pk", None):
        require_role(actor, request.tenant, OWNER_ROLES, "cancel another member's request")
    return _decide(actor=actor, request=request, action="cancel", comment=comment)


def mark_request_provisioned(*, request: CapacityRequest) -> CapacityRequest:
    """The reconciler put the approved capacity on the cluster."""
    with transaction.atomic():
        return _system_transition(request, "provision")


def _system_transition(request: CapacityRequest, action: str) -> CapacityRequest:
    """A move the system makes (provision, expire) under a lock, once: when the request has
    moved on meanwhile, nothing happens. Call inside a transaction."""
    request = CapacityRequest.objects.select_for_update().get(pk=request.pk)
    if not request.can(action):
        return request
    before = audit.snapshot(request, ["state"])
    request.transition(action)
    request.save(update_fields=["state", "updated_at"])
    audit.record(
        actor=None,
        verb=f"capacity_request.{request.state}",
        obj=request,
        tenant=request.tenant,
        before=before,
        after=audit.snapshot(request, ["state"]),
    )
    return request


# --- grants ----------------------------------------------------------------------------------


def grant_quota(
    *,
    actor,
    tenant: Tenant,
    resource_class: ResourceClass,
    amount: int,
    ends_at: datetime | None = None,
    comment: str = "",
) -> QuotaGrant:
    """A platform admin grants quota directly (no request), under the same capacity check."""
    require_platform_admin(actor, "grant quota directly")
    now = timezone.now()
    resolved = _resolve_items({resource_class.slug: amount})
    if ends_at is not None:
        _check_dates(now, ends_at, now)
    with transaction.atomic():
        _check_capacity(resolved, now, lock=True)
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        if not tenant.is_active:
            raise InvalidTransition(f"{tenant.slug} is {tenant.status}: nothing can be granted")
        _check_ceiling(tenant, resolved, now)
        grant = QuotaGrant.objects.create(
            tenant=tenant,
            resource_class=resource_class,
            amount=amount,
            starts_at=now,
            ends_at=ends_at,
            created_by=actor,
        )
        audit.record(
            actor=actor,
            verb="quota_grant.created",
            obj=grant,
            tenant=tenant,
            after={**audit.snapshot(grant, GRANT_FIELDS), "comment": comment},
        )
        _notify_desired_state_changed(tenant)
    return grant


def revoke_grant(*, actor, grant: QuotaGrant, comment: str) -> QuotaGrant:
    require_platform_admin(actor, "revoke grants")
    with transaction.atomic():
        grant = QuotaGrant.objects.select_for_update().get(pk=grant.pk)
        before = audit.snapshot(grant, GRANT_FIELDS)
        grant.end(QuotaGrant.State.REVOKED, timezone.now())
        grant.save(update_fields=["state", "ended_at"])
        audit.record(
            actor=actor,
            verb="quota_grant.revoked",
            obj=grant,
            tenant=grant.tenant,
            before=before,
            after={**audit.snapshot(grant, GRANT_FIELDS), "comment": comment},
        )
        _notify_desired_state_changed(grant.tenant)
    return grant


def expire_grants(*, now: datetime | None = None) -> int:
    """End every grant whose end has passed, and requests all of whose grants ended.
    Idempotent: a second run finds nothing to do. Returns the number of grants ended."""
    now = now or timezone.now()
    ended = 0
    due = list(
        QuotaGrant.objects.filter(state=QuotaGrant.State.ACTIVE, ends_at__lte=now).values_list(
            "pk", flat=True
        )
    )
    for pk in due:
        with transaction.atomic():
            grant = (
                QuotaGrant.objects.select_for_update(of=("self",))
                .select_related("tenant", "request")
                .get(pk=pk)
            )
            if grant.state != QuotaGrant.State.ACTIVE:
                continue
            before = audit.snapshot(grant, GRANT_FIELDS)
            grant.end(QuotaGrant.State.EXPIRED, now)
            grant.save(update_fields=["state", "ended_at"])
            audit.record(
                actor=None,
                verb="quota_grant.expired",
                obj=grant,
                tenant=grant.tenant,
                before=before,
                after=audit.snapshot(grant, GRANT_FIELDS),
            )
            request = grant.request
            if (
                request is not None
                and request.can("expire")
                and not request.grants.filter(state=QuotaGrant.State.ACTIVE).exists()
            ):
                _system_transition(request, "expire")
            _notify_desired_state_changed(grant.tenant)
            ended += 1
    return ended


def warn_expiring_grants(*, now: datetime | None = None) -> int:
    """Mail the owners of each grant that ends within the warning window, once per grant."""
    now = now or timezone.now()
    horizon = now + timedelta(hours=settings.GRANT_EXPIRY_WARNING_HOURS)
    warned = 0
    due = QuotaGrant.objects.filter(
        state=QuotaGrant.State.ACTIVE,
        ends_at__gt=now,
        ends_at__lte=horizon,
        expiry_warned_at__isnull=True,
    ).values_list("pk", flat=True)
    for pk in list(due):
        with transaction.atomic():
            grant = (
                QuotaGrant.objects.select_for_update(of=("self",))
                .select_related("tenant", "resource_class")
                .get(pk=pk)
            )
            if grant.expiry_warned_at is not None or grant.state != QuotaGrant.State.ACTIVE:
                continue
            owners = list(
                User.objects.filter(
                    memberships__tenant=grant.tenant, memberships__role=Membership.Role.OWNER
                )
                .exclude(email="")
                .values_list("email", flat=True)
            )
            grant.expiry_warned_at = now
            grant.save(update_fields=["expiry_warned_at"])
            audit.record(
                actor=None,
                verb="quota_grant.expiry_warned",
                obj=grant,
                tenant=grant.tenant,
                after={"ends_at": str(grant.ends_at), "recipients": owners},
            )
            if owners:
                message = (
                    f"The grant of {grant.amount} × {grant.resource_class.slug} for "
                    f"{grant.tenant.slug} ends at {grant.ends_at:%Y-%m-%d %H:%M %Z}. Ask for an "
                    f"extension at {settings.PORTAL_BASE_URL} before then if you still need it."
                )
                subject = f"[GPU Portal] {grant.tenant.slug}: quota ends soon"
                transaction.on_commit(
                    partial(send_mail, subject, message, settings.DEFAULT_FROM_EMAIL, owners)
                )
            warned += 1
    return warned


# --- pools and policy (platform team) -------------------------------------------------------


def set_pool(
    *,
    actor,
    resource_class: ResourceClass,
    capacity: int | None = None,
    overcommit_ratio: Decimal | None = None,
) -> Pool:
    require_platform_admin(actor, "change pools")
    if capacity is not None and (isinstance(capacity, bool) or capacity < 0):
        raise InvalidInput("capacity must be a whole number ≥ 0", field="capacity")
    if overcommit_ratio is not None and overcommit_ratio < 0:
        raise InvalidInput("overcommit ratio must be ≥ 0", field="overcommit_ratio")
    with transaction.atomic():
        pool, _ = Pool.objects.select_for_update().get_or_create(resource_class=resource_class)
        before = audit.snapshot(pool, ["capacity", "overcommit_ratio", "source"])
        if capacity is not None:
            pool.capacity = capacity
            pool.source = Pool.Source.MANUAL
        if overcommit_ratio is not None:
            pool.overcommit_ratio = overcommit_ratio
        pool.save()
        audit.record(
            actor=actor,
            verb="pool.changed",
            obj=pool,
            tenant=None,
            before=before,
            after=audit.snapshot(pool, ["capacity", "overcommit_ratio", "source"]),
        )
    return pool


def set_auto_approval_rule(
    *, actor, resource_class: ResourceClass, max_amount: int, max_duration_hours: int
) -> AutoApprovalRule:
    require_platform_admin(actor, "change the approval policy")
    if max_amount < 0 or max_duration_hours < 0:
        raise InvalidInput("limits must be ≥ 0")
    with transaction.atomic():
        rule, created = AutoApprovalRule.objects.select_for_update().get_or_create(
            resource_class=resource_class,
            defaults={"max_amount": max_amount, "max_duration_hours": max_duration_hours},
        )
        before = (
            None
            if created
            else {"max_amount": rule.max_amount, "max_duration_hours": rule.max_duration_hours}
        )
        rule.max_amount, rule.max_duration_hours = max_amount, max_duration_hours
        rule.save()
        audit.record(
            actor=actor,
            verb="policy.changed",
            obj=rule,
            tenant=None,
            before=before,
            after={"max_amount": max_amount, "max_duration_hours": max_duration_hours},
        )
    return rule


# --- API tokens -------------------------------------------------------------------------------

TOKEN_PREFIX = "gpp_"
TOKEN_FIELDS = ["name", "prefix", "scopes", "expires_at", "revoked_at"]


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def issue_token(
    *,
    actor,
    user,
    name: str,
    scopes: list[str],
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Create a token for `user` and return it with its secret, which is never stored (only its
    sha256 is) and so is shown once. People issue tokens for themselves; owners of a tenant for
    its CI robot; platform admins and the system (actor None) for anyone. Only platform admins'
    tokens may carry `approve`."""
    name = (name or "").strip()
    if not name:
        raise InvalidInput("give the token a name", field="name")
    scopes = sorted(set(scopes or []))
    if not scopes:
        raise InvalidInput("a token needs at least one scope", field="scopes")
    unknown = set(scopes) - set(ApiToken.Scope.values)
    if unknown:
        raise InvalidInput(
            f"unknown scopes {sorted(unknown)}; choose from {ApiToken.Scope.values}",
            field="scopes",
        )
    if ApiToken.Scope.APPROVE in scopes and not is_platform_admin(user):
        raise InvalidInput(
            "only platform admins' tokens may carry the approve scope", field="scopes"
        )
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidInput("the expiry must be in the future", field="expires_at")
    # actor None: the system (manage.py issue_token), with the platform's authority.
    if actor is not None and user.pk != actor.pk and not is_platform_admin(actor):
        robot_of = Tenant.objects.filter(robot=user).first()
        if robot_of is None:
            raise Forbidden("you may issue tokens only for yourself or your tenant's CI robot")
        require_role(actor, robot_of, OWNER_ROLES, "issue tokens for the CI robot")
    raw = f"{TOKEN_PREFIX}{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name,
            prefix=raw[:12],
            token_hash=hash_token(raw),
            scopes=scopes,
            expires_at=expires_at,
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
        )
        robot_tenant = Tenant.objects.filter(robot=user).first()
        audit.record(
            actor=actor,
            verb="api_token.issued",
            obj=token,
            tenant=robot_tenant,
            after={**audit.snapshot(token, TOKEN_FIELDS), "user": user.get_username()},
        )
    return token, raw


def revoke_token(*, actor, token: ApiToken) -> ApiToken:
    if token.user_id != getattr(actor, "pk", None) and not is_platform_admin(actor):
        robot_of = Tenant.objects.filter(robot_id=token.user_id).first()
        if robot_of is None:
            raise Forbidden("you may revoke only your own tokens")
        require_role(actor, robot_of, OWNER_ROLES, "revoke the CI robot's tokens")
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().get(pk=token.pk)
        if token.revoked_at is not None:
            raise InvalidTransition(f"token {token.prefix}… is already revoked")
        before = audit.snapshot(token, TOKEN_FIELDS)
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit.record(
            actor=actor,
            verb="api_token.revoked",
            obj=token,
            tenant=Tenant.objects.filter(robot_id=token.user_id).first(),
            before=before,
            after=audit.snapshot(token, TOKEN_FIELDS),
        )
    return token


def authenticate_token(raw: str, *, now: datetime | None = None) -> ApiToken | None:
    """The usable token with this secret, or None; records its last use (at most once a
    minute, so a busy CI job does not write on every call)."""
    if not raw.startswith(TOKEN_PREFIX):
        return None
    now = now or timezone.now()
    token = (
        ApiToken.objects.usable(now)
        .select_related("user")
        .filter(token_hash=hash_token(raw))
        .first()
    )
    if token is None or not token.user.is_active:
        return None
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
