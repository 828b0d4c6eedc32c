"""Where a workspace is opened: the portal's scheme and host (or WORKSPACE_HOST), its path."""

from __future__ import annotations

from django.conf import settings

from workspaces.manifests import path_prefix
from workspaces.models import Workspace


def link(ws: Workspace) -> str:
    base = settings.PORTAL_BASE_URL.rstrip("/")
    scheme = base.split("://", 1)[0] if "://" in base else "https"
    host = settings.WORKSPACE_HOST or base.split("://", 1)[-1].split("/", 1)[0]
    return f"{scheme}://{host}{path_prefix(ws.tenant.namespace, ws.name)}"
