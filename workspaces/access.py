"""Who may open a workspace's server: its owner, and the teammates the owner shared it with
(issue 51: a workspace runs its owner's code with its owner's files; a teammate who could open
it could plant script there that runs when the owner opens it). Each of them must still be an
owner or member of the team: viewers read the team's pages but never run code in its namespace,
and someone who left the team opens nothing. 401 for a caller with no session (sent to sign
in), 403 for everyone else, an unknown workspace included (nothing says whether it exists)."""

from __future__ import annotations

from tenants.permissions import WRITE_ROLES, role_in
from workspaces.models import Workspace

ALLOWED, SIGN_IN, REFUSED = 200, 401, 403


def may_open(user, workspace: Workspace) -> bool:
    if role_in(user, workspace.tenant) not in WRITE_ROLES:
        return False
    return user.pk == workspace.owner_id or workspace.shared_with.filter(pk=user.pk).exists()


def decide_access(user, workspace: Workspace | None) -> int:
    if not getattr(user, "is_authenticated", False):
        return SIGN_IN
    if workspace is None or not may_open(user, workspace):
        return REFUSED
    return ALLOWED
