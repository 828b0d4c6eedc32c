"""A workspace's own cluster objects (volume claim, Service, Ingress): from its row and the
settings to the pure manifests, applied through the one door to the cluster."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from django.conf import settings

from scheduler.cluster.kube import KubeGateway
from workspaces.manifests import WorkspaceSpec, render_objects
from workspaces.models import Workspace


def ingress_host(base_url: str) -> str:
    """WORKSPACE_HOST, else the portal's own host; "" (any host) where that is an IP address,
    which an Ingress rule may not name."""
    host = settings.WORKSPACE_HOST or urlsplit(base_url).hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host
    return ""


def spec_for(ws: Workspace) -> WorkspaceSpec:
    base = settings.PORTAL_BASE_URL.rstrip("/")
    internal = (settings.WORKSPACE_AUTH_BASE_URL or base).rstrip("/")
    return WorkspaceSpec(
        workspace_id=ws.pk,
        name=ws.name,
        namespace=ws.tenant.namespace,
        tenant=ws.tenant.slug,
        instance=settings.PORTAL_INSTANCE,
        kind=ws.kind,
        home_size=ws.home_size,
        storage_class=settings.WORKSPACE_STORAGE_CLASS,
        host=ingress_host(base),
        auth_url=f"{internal}/workspaces/{ws.pk}/auth/",
        signin_url=f"{base}/accounts/login/?next=$escaped_request_uri",
        ingress_class=settings.WORKSPACE_INGRESS_CLASS,
    )


def apply_objects(kube: KubeGateway, workspace_id: int) -> list[str]:
    """Apply the workspace's volume claim, Service and Ingress (server-side apply: running it
    twice changes nothing); returns what was applied."""
    ws = Workspace.objects.select_related("tenant").filter(pk=workspace_id).first()
    if ws is None:
        return []
    applied = []
    for manifest in render_objects(spec_for(ws)):
        kube.apply(manifest)
        applied.append(f"{manifest['kind']}/{manifest['metadata']['name']}")
    return applied
