"""Where a workspace is opened: the portal's open link (one click: the portal checks the person
and sends the browser on with a one-time ticket) and the workspace's own origin,
`<WORKSPACE_SCHEME>://w<id>.<WORKSPACE_DOMAIN>`, where its auth proxy serves it."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from workspaces.models import Workspace
from workspaces.sites import workspace_host

ENTER_PATH = "/_portal/enter"  # the proxy's: exchanges a ticket for the workspace cookie


def link(ws: Workspace) -> str:
    """The portal's one-click link (the page's and the API's)."""
    base = settings.PORTAL_BASE_URL.rstrip("/")
    return base + reverse("workspaces:workspace_open", args=[ws.pk])


def origin(ws: Workspace) -> str:
    return f"{settings.WORKSPACE_SCHEME}://{workspace_host(ws.pk, settings.WORKSPACE_DOMAIN)}"
