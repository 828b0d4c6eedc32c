"""Sharing a workspace (issue 51, 3): a workspace is opened by its owner only, unless the owner
shares it with named teammates (owners or members of the team: viewers never run code in its
namespace). Every share and unshare is audited in its transaction; an unshare takes effect at
the proxy's next check with the portal."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from core import audit
from core.errors import Forbidden, InvalidInput
from tenants.models import Membership
from tenants.permissions import WRITE_ROLES, require_role
from workspaces.models import Workspace


def may_share(actor, ws: Workspace) -> bool:
    return getattr(actor, "pk", None) == ws.owner_id


def share_choices(ws: Workspace) -> list[str]:
    """Teammates it may be shared with: the team's owners and members but its owner and those
    it is shared with already."""
    shared = set(ws.shared_with.values_list("pk", flat=True))
    return sorted(
        m.user.get_username()
        for m in Membership.objects.filter(tenant=ws.tenant, role__in=WRITE_ROLES).select_related(
            "user"
        )
        if m.user_id != ws.owner_id and m.user_id not in shared and m.user.is_active
    )


def _teammate(ws: Workspace, username: object):
    if not isinstance(username, str) or not username.strip():
        raise InvalidInput("user: the username of a teammate to share it with", field="user")
    user = get_user_model().objects.filter(username=username.strip(), is_active=True).first()
    role = (
        Membership.objects.filter(tenant=ws.tenant, user=user)
        .values_list("role", flat=True)
        .first()
        if user is not None
        else None
    )
    if role not in WRITE_ROLES:
        raise InvalidInput(
            f"{username.strip()!r} is not an owner or member of {ws.tenant.slug}: share it with "
            "one of them (viewers never run code in the team's namespace)",
            field="user",
        )
    return user


def _require_owner(actor, ws: Workspace, doing: str) -> None:
    require_role(actor, ws.tenant, WRITE_ROLES, doing)
    if not may_share(actor, ws):
        raise Forbidden(f"only {ws.owner} may {doing} {ws.name}")


def share_workspace(*, actor, workspace: Workspace, username: object) -> Workspace:
    _require_owner(actor, workspace, "share")
    user = _teammate(workspace, username)
    if user.pk == workspace.owner_id:
        raise InvalidInput(f"{user} owns {workspace.name} already", field="user")
    with transaction.atomic():
        ws = Workspace.objects.select_for_update().get(pk=workspace.pk)
        if ws.shared_with.filter(pk=user.pk).exists():
            raise InvalidInput(f"{ws.name} is shared with {user} already", field="user")
        ws.shared_with.add(user)
        audit.record(
            actor=actor,
            verb="workspace.shared",
            obj=ws,
            tenant=workspace.tenant,
            after={"user": user.get_username()},
        )
    return ws


def unshare_workspace(*, actor, workspace: Workspace, username: object) -> Workspace:
    _require_owner(actor, workspace, "unshare")
    if not isinstance(username, str) or not username.strip():
        raise InvalidInput("user: the username to stop sharing it with", field="user")
    with transaction.atomic():
        ws = Workspace.objects.select_for_update().get(pk=workspace.pk)
        user = ws.shared_with.filter(username=username.strip()).first()
        if user is None:
            raise InvalidInput(f"{ws.name} is not shared with {username.strip()!r}", field="user")
        ws.shared_with.remove(user)
        audit.record(
            actor=actor,
            verb="workspace.unshared",
            obj=ws,
            tenant=workspace.tenant,
            before={"user": user.get_username()},
        )
    return ws
