"""A workspace's cluster objects besides its run, pure (dicts in the kubespawner style): the home
PersistentVolumeClaim (kept across stops), a ClusterIP Service (no open port: nothing outside
the cluster reaches it but through the Ingress), and an Ingress whose every request is first
asked of the portal (nginx `auth-url`: 2xx lets it through, 401 sends the browser to sign in,
403 refuses). Also what the run's container runs: the server on WORKSPACE_PORT under the
workspace's path, its home on the volume."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.cluster.render.labels import (
    INSTANCE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    TENANT_LABEL,
    WORKSPACE_LABEL,
)
from scheduler.cluster.render.network import WORKSPACE_PORT

PORT = WORKSPACE_PORT  # the tenant's NetworkPolicy lets the ingress controller reach it
HOMES = {"jupyter": "/home/jovyan", "code-server": "/home/coder"}
NGINX = "nginx.ingress.kubernetes.io/"


@dataclass(frozen=True)
class WorkspaceSpec:
    workspace_id: int
    name: str  # the workspace's own name (DNS label)
    namespace: str
    tenant: str
    instance: str
    kind: str  # "jupyter" or "code-server"
    home_size: str
    storage_class: str  # "" leaves it to the cluster's default class
    host: str  # the portal's host: the session cookie must reach the auth request ("": any)
    auth_url: str  # the portal's auth decision for this workspace
    signin_url: str
    ingress_class: str


def object_name(name: str) -> str:
    return f"ws-{name}"


def claim_name(name: str) -> str:
    return f"ws-{name}-home"


def path_prefix(namespace: str, name: str) -> str:
    """Where the workspace lives on the portal's host: /ws/<namespace>/<name>/."""
    return f"/ws/{namespace}/{name}/"


def labels(spec: WorkspaceSpec) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        INSTANCE_LABEL: spec.instance,
        TENANT_LABEL: spec.tenant,
        WORKSPACE_LABEL: str(spec.workspace_id),
    }


def _meta(spec: WorkspaceSpec, name: str) -> dict:
    return {"name": name, "namespace": spec.namespace, "labels": labels(spec)}


def render_claim(spec: WorkspaceSpec) -> dict:
    claim: dict = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": spec.home_size}},
    }
    if spec.storage_class:
        claim["storageClassName"] = spec.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(spec, claim_name(spec.name)),
        "spec": claim,
    }


def render_service(spec: WorkspaceSpec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(spec, object_name(spec.name)),
        "spec": {
            "type": "ClusterIP",
            "selector": {WORKSPACE_LABEL: str(spec.workspace_id)},
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def render_ingress(spec: WorkspaceSpec) -> dict:
    meta = _meta(spec, object_name(spec.name))
    path, path_type = path_prefix(spec.namespace, spec.name), "Prefix"
    rewrite = {}
    if spec.kind == "code-server":
        # code-server serves from / (relative links): the prefix is cut off on the way in
        path, path_type = f"{path.rstrip('/')}(/|$)(.*)", "ImplementationSpecific"
        rewrite = {NGINX + "use-regex": "true", NGINX + "rewrite-target": "/$2"}
    meta["annotations"] = {
        **rewrite,
        NGINX + "auth-url": spec.auth_url,
        NGINX + "auth-signin": spec.signin_url,
        NGINX + "auth-response-headers": "X-Auth-Request-User",
        # kernels and terminals are websockets that stay open for hours
        NGINX + "proxy-read-timeout": "3600",
        NGINX + "proxy-send-timeout": "3600",
        NGINX + "proxy-body-size": "512m",
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": meta,
        "spec": {
            "ingressClassName": spec.ingress_class,
            "rules": [
                {
                    **({"host": spec.host} if spec.host else {}),  # none: any host
                    "http": {
                        "paths": [
                            {
                                "path": path,
                                "pathType": path_type,
                                "backend": {
                                    "service": {
                                        "name": object_name(spec.name),
                                        "port": {"number": PORT},
                                    }
                                },
                            }
                        ]
                    },
                }
            ],
        },
    }


def render_objects(spec: WorkspaceSpec) -> list[dict]:
    return [render_claim(spec), render_service(spec), render_ingress(spec)]


def server_command(kind: str, namespace: str, name: str) -> tuple[list[str], list[str]]:
    """(command, args) of the run's container: the server on PORT, under the workspace's path,
    with no password of its own (the Ingress asks the portal; the namespace's NetworkPolicy
    keeps other teams' pods away)."""
    prefix = path_prefix(namespace, name)
    if kind == "code-server":
        return ["code-server"], [
            f"--bind-addr=0.0.0.0:{PORT}",
            "--auth=none",
            f"--abs-proxy-base-path={prefix.rstrip('/')}",  # its absolute links
            HOMES[kind],
        ]
    return ["jupyter", "lab"], [
        "--ServerApp.ip=0.0.0.0",
        f"--ServerApp.port={PORT}",
        f"--ServerApp.base_url={prefix}",
        "--ServerApp.token=",
        "--ServerApp.password=",
        "--no-browser",
        f"--ServerApp.root_dir={HOMES[kind]}",
    ]


def status_url(kind: str, namespace: str, name: str) -> str:
    """Where the portal reads the server's activity, inside the cluster: Jupyter's /api/status
    (`last_activity`), code-server's /healthz (`lastHeartbeat`)."""
    base = f"http://{object_name(name)}.{namespace}.svc:{PORT}"
    if kind == "code-server":
        return f"{base}/healthz"
    return f"{base}{path_prefix(namespace, name)}api/status"
