"""Who may reach a workspace's server: the portal's decision behind the Ingress's auth request
(nginx `auth-url`). Answered by session and team membership: 200 for the team's members and
owners, 401 for a caller with no session (the Ingress sends the browser to sign in), 403 for
everyone else, an unknown workspace included (nothing says whether it exists). Viewers may read
the team's pages but not run code in its namespace."""

from __future__ import annotations

from tenants.permissions import WRITE_ROLES, role_in
from workspaces.models import Workspace

ALLOWED, SIGN_IN, REFUSED = 200, 401, 403


def decide_access(user, workspace: Workspace | None) -> int:
    if not getattr(user, "is_authenticated", False):
        return SIGN_IN
    if workspace is None or role_in(user, workspace.tenant) not in WRITE_ROLES:
        return REFUSED
    return ALLOWED
