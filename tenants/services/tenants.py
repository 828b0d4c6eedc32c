"""Tenants and their members: create, edit, suspend, resume and archive tenants; add members,
change their roles and remove them, never the last owner."""

from __future__ import annotations

from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from catalog import idle_policy, run_limits
from core import audit
from core.errors import InvalidInput, InvalidTransition
from core.permissions import require_platform_admin
from tenants.models import Membership, QuotaGrant, Tenant
from tenants.models.priority_classes import PRIORITY_CLASSES
from tenants.models.tenants import dns_label
from tenants.permissions import OWNER_ROLES, require_role
from tenants.services.audit_fields import TENANT_FIELDS
from tenants.services.follow_up import notify_desired_state_changed
from tenants.services.locks import lock_rows
from tenants.services.tokens import revoke_robot_tokens_made_by

User = get_user_model()


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
            f"unknown priority classes {', '.join(sorted(unknown))}; choose from "
            f"{', '.join(PRIORITY_CLASSES)}",
            field="allowed_priority_classes",
        )
    try:
        return _create_tenant(actor, slug, name, cost_centre, gpu_ceiling, monthly_budget, allowed)
    except IntegrityError:
        # A concurrent create took the slug or the robot's name between the checks and the
        # insert (it has committed, so it is seen now): the refusal it would have had.
        taken = Tenant.objects.filter(slug=slug).exists()
        if not taken and not User.objects.filter(username=f"robot-{slug}").exists():
            raise
        raise InvalidInput(
            f"a tenant {slug!r} or its CI robot's user 'robot-{slug}' was created at the same "
            "time; choose another slug",
            field="slug",
        ) from None


def _create_tenant(actor, slug, name, cost_centre, gpu_ceiling, monthly_budget, allowed):
    robot_name = f"robot-{slug}"
    with transaction.atomic():
        if Tenant.objects.filter(slug=slug).exists():
            raise InvalidInput(f"a tenant {slug!r} exists already", field="slug")
        # The CI robot is `robot-<slug>`: a person (or a leftover) may hold that name already.
        if User.objects.filter(username=robot_name).exists():
            raise InvalidInput(
                f"the tenant's CI robot would be the user {robot_name!r}, which exists already; "
                "choose another slug (or rename that user first)",
                field="slug",
            )
        robot = User.objects.create_user(username=robot_name, is_active=True)
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
        notify_desired_state_changed(tenant)
    return tenant


EDITABLE_TENANT_FIELDS = {
    "name",
    "cost_centre",
    "gpu_ceiling",
    "monthly_budget",
    "allowed_priority_classes",
    "critical_gpu_quota",
    "fair_share_weight",
    "max_run_s",
    *idle_policy.FIELDS,
}


def update_tenant(*, actor, tenant: Tenant, **changes) -> Tenant:
    require_platform_admin(actor, "edit tenants")
    unknown = set(changes) - EDITABLE_TENANT_FIELDS
    if unknown:
        raise InvalidInput(f"cannot change {', '.join(sorted(unknown))} here")
    bad = set(changes.get("allowed_priority_classes") or []) - set(PRIORITY_CLASSES)
    if bad:
        raise InvalidInput(
            f"unknown priority classes {', '.join(sorted(bad))}", field="allowed_priority_classes"
        )
    if "max_run_s" in changes:  # jobs already submitted keep the limit they were told
        changes["max_run_s"] = run_limits.check_max_run_s(changes["max_run_s"])
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        before = audit.snapshot(tenant, sorted(changes))
        for name, value in changes.items():
            setattr(tenant, name, value)
        if set(changes) & set(idle_policy.FIELDS):
            # the team's idle policy as a whole, as a pool's is: a 400 says which field
            idle_policy.check_idle_policy(*(getattr(tenant, f) for f in idle_policy.FIELDS))
        tenant.save(update_fields=sorted(changes))
        audit.record(
            actor=actor,
            verb="tenant.edited",
            obj=tenant,
            tenant=tenant,
            before=before,
            after=audit.snapshot(tenant, sorted(changes)),
        )
        notify_desired_state_changed(tenant)
    return tenant


def change_tenant_status(*, actor, tenant: Tenant, action: str) -> Tenant:
    """`suspend`, `resume` or `archive` a tenant."""
    require_platform_admin(actor, f"{action} tenants")
    if action not in Tenant._transitions:
        raise InvalidInput(f"unknown action {action!r}; use suspend, resume or archive")
    now = timezone.now()
    with transaction.atomic():
        # An archived tenant holds nothing: its grants end with it (locked after the tenant).
        holding = QuotaGrant.objects.holding(now).filter(tenant_id=tenant.pk)
        locked = lock_rows(tenant=tenant, grants=holding if action == "archive" else None)
        tenant = locked.tenant
        before = audit.snapshot(tenant, ["status"])
        tenant.transition(action)
        tenant.save(update_fields=["status"])
        for grant in locked.grants:
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
        notify_desired_state_changed(tenant)
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
    already = InvalidInput(f"{username} is already in {tenant.slug}", field="username")
    with transaction.atomic():
        if Membership.objects.filter(tenant=tenant, user=user).exists():
            raise already
        try:
            with transaction.atomic():  # a savepoint: added at the same moment elsewhere
                membership = Membership.objects.create(tenant=tenant, user=user, role=role)
        except IntegrityError:  # (a sign-in, another owner): one wins, the other is told
            raise already from None
        audit.record(
            actor=actor,
            verb="membership.added",
            obj=membership,
            tenant=tenant,
            after={"user": username, "role": role},
        )
        notify_desired_state_changed(tenant)
    return membership


def other_active_owners(membership: Membership):
    """The team's other owners who can still sign in: a deactivated (or erased) account is no
    owner to hand the team to."""
    return Membership.objects.filter(
        tenant_id=membership.tenant_id, role=Membership.Role.OWNER, user__is_active=True
    ).exclude(pk=membership.pk)


def refuse_last_owner(membership: Membership, new_role: str | None) -> None:
    """A team keeps an owner who can sign in: its last one may neither leave (`new_role` None)
    nor step down, and is told to make someone else owner first. Also what the team page and
    the confirm page ask before offering either."""
    if membership.role != Membership.Role.OWNER or new_role == Membership.Role.OWNER:
        return
    if not other_active_owners(membership).exists():
        doing = "leave" if new_role is None else f"become {new_role}"
        raise InvalidInput(
            f"{membership.user.get_username()} is the last owner of {membership.tenant.slug}, "
            f"so cannot {doing}: make another member owner first (choose Owner in their row), "
            "then try again",
            field="role",
            code="last_owner",
        )


def refuse_provider_managed(membership: Membership, doing: str) -> None:
    if membership.follows_provider:
        raise InvalidTransition(
            f"cannot {doing} {membership.user.get_username()} in {membership.tenant.slug}: the "
            "membership comes from the identity provider's groups; change their groups there "
            "(the portal follows at their next sign-in)"
        )


def change_member_role(*, actor, membership: Membership, role: str) -> Membership:
    require_role(actor, membership.tenant, OWNER_ROLES, "change roles")
    _check_role(role)
    with transaction.atomic():
        # The tenant first (lock_rows' order): two owners demoting each other count owners in
        # turn, so one of them is refused as the last owner.
        lock_rows(tenant=membership.tenant_id)
        membership = Membership.objects.select_for_update().get(pk=membership.pk)
        refuse_provider_managed(membership, "change the role of")
        refuse_last_owner(membership, role)
        before = {"role": membership.role, "source": membership.source}
        membership.role = role
        # the provider no longer manages it (group mapping is off): the portal's from now on
        membership.source = Membership.Source.LOCAL
        membership.save(update_fields=["role", "source"])
        audit.record(
            actor=actor,
            verb="membership.changed",
            obj=membership,
            tenant=membership.tenant,
            before=before,
            after={"role": role, "source": membership.source},
        )
        notify_desired_state_changed(membership.tenant)
    return membership


def remove_member(*, actor, membership: Membership) -> None:
    require_role(actor, membership.tenant, OWNER_ROLES, "remove members")
    with transaction.atomic():
        lock_rows(tenant=membership.tenant_id)  # as a role change: owners are counted in turn
        membership = Membership.objects.select_for_update().get(pk=membership.pk)
        refuse_provider_managed(membership, "remove")
        refuse_last_owner(membership, None)
        tenant = membership.tenant
        audit.record(
            actor=actor,
            verb="membership.removed",
            obj=membership,
            tenant=tenant,
            before={"user": membership.user.get_username(), "role": membership.role},
        )
        membership.delete()
        revoke_robot_tokens_made_by(user=membership.user, tenant=tenant, why="left the team")
        notify_desired_state_changed(tenant)
