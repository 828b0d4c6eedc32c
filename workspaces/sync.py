"""A workspace's own cluster objects (volume claim, Service, server Secret): from its row and the
settings to the pure manifests, applied through the one door to the cluster."""

from __future__ import annotations

from django.conf import settings

from scheduler.cluster.kube import KubeGateway
from workspaces import server_secret
from workspaces.manifests import WorkspaceSpec, object_name, render_objects
from workspaces.models import Workspace


def spec_for(ws: Workspace) -> WorkspaceSpec:
    return WorkspaceSpec(
        workspace_id=ws.pk,
        name=ws.name,
        namespace=ws.tenant.namespace,
        tenant=ws.tenant.slug,
        instance=settings.PORTAL_INSTANCE,
        kind=ws.kind,
        home_size=ws.home_size,
        storage_class=settings.WORKSPACE_STORAGE_CLASS,
    )


def ensure_server_secret(ws: Workspace) -> str:
    """The workspace's server secret; a new one (sealed on its row) where it has none or the
    sealed one cannot be read (a workspace from before issue 51, a SECRET_KEY rotated)."""
    secret = server_secret.unseal(ws.server_secret_sealed)
    if secret is None:
        secret = server_secret.new_secret(ws.kind)
        ws.server_secret_sealed = server_secret.seal(secret)
        Workspace.objects.filter(pk=ws.pk).update(server_secret_sealed=ws.server_secret_sealed)
    return secret


def apply_objects(kube: KubeGateway, workspace_id: int) -> list[str]:
    """Apply the workspace's volume claim, Service and server Secret (server-side apply: running
    it twice changes nothing) and delete the nginx Ingress workspaces had before issue 51;
    returns what was applied."""
    ws = Workspace.objects.select_related("tenant").filter(pk=workspace_id).first()
    if ws is None:
        return []
    applied = []
    for manifest in render_objects(spec_for(ws), ensure_server_secret(ws)):
        if manifest["kind"] == "Secret":
            # write-only: the portal may create and delete Secrets, never get or patch them (a
            # patch answers with the object), so it cannot read a team's own Secrets
            kube.delete("Secret", manifest["metadata"]["name"], ws.tenant.namespace)
            kube.create(manifest)
        else:
            kube.apply(manifest)
        applied.append(f"{manifest['kind']}/{manifest['metadata']['name']}")
    if kube.delete("Ingress", object_name(ws.name), ws.tenant.namespace):
        applied.append(f"-Ingress/{object_name(ws.name)}")
    return applied
