"""The portal's side of the workspace auth proxy (workspaces/proxy/): it exchanges a ticket for a
workspace session, and answers, for a session, whether its person may still open the workspace
and, if so, where the server is and the server's own secret to add upstream. Plain functions:
the views in proxy_views.py parse and answer, nothing more."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model

from core.errors import InvalidTransition
from workspaces import access, server_secret, tickets
from workspaces.manifests import PORT, object_name, path_prefix
from workspaces.models import Workspace


def _workspace(workspace_id: int) -> Workspace:
    ws = Workspace.objects.select_related("tenant", "owner").filter(pk=workspace_id).first()
    if ws is None:
        raise tickets.Refused("no such workspace")
    return ws


def _person(ws: Workspace, user_id: int):
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if user is None or access.decide_access(user, ws) != access.ALLOWED:
        raise tickets.Refused(f"not someone who may open {ws.name}")
    return user


def enter(*, workspace_id: int, ticket: object) -> dict:
    """A ticket spent for a session cookie's value (and how long the cookie lasts)."""
    ws = _workspace(workspace_id)
    user = _person(ws, tickets.redeem_ticket(ticket, ws.pk))
    return {
        "session": tickets.session_value(ws.pk, user.pk),
        "max_age": settings.WORKSPACE_SESSION_MAX_AGE_S,
        "user": user.get_username(),
    }


def check(*, workspace_id: int, session: object) -> dict:
    """Whether the session's person may open the workspace now (a share withdrawn, a membership
    ended: refused at the next check), and what the proxy needs to pass the request on."""
    ws = _workspace(workspace_id)
    user = _person(ws, tickets.read_session(session, ws.pk))
    secret = server_secret.unseal(ws.server_secret_sealed)
    if secret is None:
        raise InvalidTransition(f"{ws.name} has no server secret yet: restart it from its page")
    upstream = settings.WORKSPACE_UPSTREAM.format(
        service=object_name(ws.name), namespace=ws.tenant.namespace, port=PORT
    )
    # code-server serves from / (its links are relative, --abs-proxy-base-path the absolute
    # ones): the proxy cuts the workspace's path off on the way in, as the Ingress's rewrite did
    cut = path_prefix(ws.tenant.namespace, ws.name).rstrip("/") if ws.kind == "code-server" else ""
    return {
        "user": user.get_username(),
        "upstream": upstream,
        "strip_prefix": cut,
        **server_secret.upstream_credentials(ws.kind, secret),
    }
