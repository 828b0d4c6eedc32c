"""Who may do what in a tenant. Services call these; views never decide on their own."""

from __future__ import annotations

from core.errors import Forbidden, NotFound
from core.permissions import is_platform_admin
from tenants.models import Membership, Tenant

Role = Membership.Role

# Roles allowed for each kind of action, weakest first.
READ_ROLES = frozenset({Role.OWNER, Role.MEMBER, Role.VIEWER})
WRITE_ROLES = frozenset({Role.OWNER, Role.MEMBER})
OWNER_ROLES = frozenset({Role.OWNER})


# Where `remember_role` keeps a caller's role on a tenant read for this request: (user id, role).
_REMEMBERED_ROLE = "_caller_role"


def remember_role(tenant: Tenant, user, role: str | None) -> None:
    """Keep `user`'s role in `tenant` (None: not a member), read with the tenant in the same
    query, so that `role_in` for this user and this tenant object does not read it again."""
    setattr(tenant, _REMEMBERED_ROLE, (user.pk, role))


def role_in(user, tenant: Tenant) -> str | None:
    if not getattr(user, "is_authenticated", False):
        return None
    remembered = getattr(tenant, _REMEMBERED_ROLE, None)
    if remembered is not None and remembered[0] == user.pk:
        return remembered[1]
    # Use a prefetched list when the caller has one; one query otherwise.
    cache = getattr(tenant, "_prefetched_objects_cache", {}).get("memberships")
    if cache is not None:
        return next((m.role for m in cache if m.user_id == user.pk), None)
    return (
        Membership.objects.filter(tenant=tenant, user=user).values_list("role", flat=True).first()
    )


def require_role(user, tenant: Tenant, roles: frozenset[str], doing: str) -> None:
    """Platform admins may do anything; others need one of `roles` in the tenant.
    A user with no membership at all gets NotFound, so the tenant's existence is not confirmed."""
    if is_platform_admin(user):
        return
    role = role_in(user, tenant)
    if role is None:
        raise NotFound(f"no tenant {tenant.slug!r}")
    if role not in roles:
        needed = " or ".join(sorted(roles))
        raise Forbidden(f"to {doing} in {tenant.slug} you need the role {needed}; you are {role}")


def _has(user, tenant: Tenant, roles: frozenset[str]) -> bool:
    return is_platform_admin(user) or role_in(user, tenant) in roles


def can_ask(user, tenant: Tenant) -> bool:
    """May ask for capacity and submit workloads."""
    return _has(user, tenant, WRITE_ROLES)


def can_manage_members(user, tenant: Tenant) -> bool:
    return _has(user, tenant, OWNER_ROLES)


def can_cancel(user, capacity_request) -> bool:
    return capacity_request.requester_id == getattr(user, "pk", None) or _has(
        user, capacity_request.tenant, OWNER_ROLES
    )


def can_cancel_now(user, capacity_request) -> bool:
    """The request's state allows cancelling it now, and this person may (pages offer it)."""
    return capacity_request.can("cancel") and can_cancel(user, capacity_request)
