"""A workspace's cluster objects besides its run, pure (dicts in the kubespawner style): the home
PersistentVolumeClaim (kept across stops), a ClusterIP Service (no open port: nothing outside
the cluster reaches it but through the portal's workspace proxy, workspaces/proxy/), and the
Secret that holds the server's own secret (its token or hashed password: the server refuses a
request without it, and only the proxy adds it). Also what the run's container runs: the
server on WORKSPACE_PORT under the workspace's path, its home on the volume, its secret from
the Secret."""

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
from workspaces.server_secret import ENV_NAMES, SECRET_KEY_NAME

PORT = WORKSPACE_PORT  # the tenant's NetworkPolicy lets the ingress controller reach it
HOMES = {"jupyter": "/home/jovyan", "code-server": "/home/coder"}


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


def object_name(name: str) -> str:
    return f"ws-{name}"


def secret_name(name: str) -> str:
    return f"ws-{name}-server"


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


def render_secret(spec: WorkspaceSpec, secret: str) -> dict:
    """The server's own secret, for its container's environment only."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(spec, secret_name(spec.name)),
        "type": "Opaque",
        "stringData": {SECRET_KEY_NAME: secret},
    }


def render_objects(spec: WorkspaceSpec, secret: str) -> list[dict]:
    return [render_claim(spec), render_service(spec), render_secret(spec, secret)]


def server_command(kind: str, namespace: str, name: str) -> tuple[list[str], list[str]]:
    """(command, args) of the run's container: the server on PORT, under the workspace's path,
    checking its own secret (read from the environment, `server_env`: never on the command
    line, which the team's pod readers see)."""
    prefix = path_prefix(namespace, name)
    if kind == "code-server":
        return ["code-server"], [
            f"--bind-addr=0.0.0.0:{PORT}",
            "--auth=password",  # HASHED_PASSWORD: the proxy sends it as the session cookie
            f"--abs-proxy-base-path={prefix.rstrip('/')}",  # its absolute links
            HOMES[kind],
        ]
    return ["jupyter", "lab"], [
        "--ServerApp.ip=0.0.0.0",
        f"--ServerApp.port={PORT}",
        f"--ServerApp.base_url={prefix}",
        "--ServerApp.password=",  # none: the token (JUPYTER_TOKEN) is the only way in
        "--no-browser",
        f"--ServerApp.root_dir={HOMES[kind]}",
    ]


def server_env(kind: str, name: str) -> dict[str, dict[str, str]]:
    """The server's secret in its environment, from the workspace's Secret."""
    return {ENV_NAMES[kind]: {"secret": secret_name(name), "key": SECRET_KEY_NAME}}


def status_url(kind: str, namespace: str, name: str) -> str:
    """Where the portal reads the server's activity, inside the cluster: Jupyter's /api/status
    (`last_activity`), code-server's /healthz (`lastHeartbeat`)."""
    base = f"http://{object_name(name)}.{namespace}.svc:{PORT}"
    if kind == "code-server":
        return f"{base}/healthz"
    return f"{base}{path_prefix(namespace, name)}api/status"
