"""A worker cluster's kubeconfig, checked as MultiKueue will check it (pure: text in, a verdict
out, nothing read from disk or the cluster).

The portal and Kueue's MultiKueue both reach a worker through one kubeconfig, kept in a Secret
on the manager under the key `kubeconfig`. Kueue v0.19 refuses a kubeconfig with a `tokenFile`,
`insecure-skip-tls-verify`, a `certificate-authority` file path, an `exec` plugin, an
`auth-provider`, basic auth, or a server that is not a plain host name or IP
(`pkg/controller/admissionchecks/multikueue/multikueuecluster.go`, `validateKubeconfig`): its
MultiKueueCluster then stays inactive with reason `InsecureKubeConfig`. The portal refuses the
same, and file paths for the client certificate and key too (a Secret cannot carry files), so
that the platform team reads what to change on the cluster's page instead of a silent queue.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import yaml

SECRET_KEY = "kubeconfig"  # the key MultiKueue reads (kueue.MultiKueueConfigSecretKey)
MAX_BYTES = 256 * 1024  # a kubeconfig is a few KiB; a Secret holds at most 1 MiB

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# What Kueue refuses (or a Secret cannot hold), and what to use instead.
_CLUSTER_REFUSED = {
    "insecure-skip-tls-verify": "remove it: MultiKueue requires TLS verification",
    "certificate-authority": "embed the CA as certificate-authority-data (base64)",
}
_USER_REFUSED = {
    "tokenFile": "put the token itself in `token`",
    "exec": "exec plugins are refused by MultiKueue; use a ServiceAccount token or a client "
    "certificate",
    "auth-provider": "auth providers are refused by MultiKueue; use a ServiceAccount token or a "
    "client certificate",
    "username": "basic auth is refused by MultiKueue; use a ServiceAccount token",
    "password": "basic auth is refused by MultiKueue; use a ServiceAccount token",
    "client-certificate": "embed it as client-certificate-data (base64)",
    "client-key": "embed it as client-key-data (base64)",
}


class BadKubeconfig(ValueError):
    """What is wrong with a kubeconfig and what to change: shown as it is."""


@dataclass(frozen=True)
class Kubeconfig:
    """What may be shown of a checked kubeconfig: never a token, key or certificate."""

    server: str
    context: str
    user: str


def _named(config: dict, section: str, name: str, key: str) -> dict:
    for entry in config.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(key)
            if isinstance(body, dict):
                return body
    raise BadKubeconfig(f"the current context names {key} {name!r}, which {section} lacks")


def _base64(value, what: str) -> None:
    try:
        base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise BadKubeconfig(f"{what} is not base64: paste the file's base64, not a path") from None


def _check_server(name: str, server) -> None:
    if not server or not isinstance(server, str):
        raise BadKubeconfig(f"cluster {name!r} has no server URL; set clusters[].cluster.server")
    parts = urlsplit(server)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("https", "http") or not host:
        raise BadKubeconfig(
            f"cluster {name!r}: the server {server!r} is not a URL; write https://host:port"
        )
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if len(host) > 253 or not _DNS_SUBDOMAIN.match(host):
            raise BadKubeconfig(
                f"cluster {name!r}: MultiKueue refuses the server host {host!r} (a DNS name of "
                "lower-case letters, digits, dashes and dots, or an IP address)"
            ) from None


def check_kubeconfig(text: str) -> Kubeconfig:
    """The kubeconfig's current context, checked as MultiKueue checks it; `BadKubeconfig` says
    what to change. Every cluster and user entry is checked, not only the current one: Kueue
    checks them all."""
    if len(text.encode()) > MAX_BYTES:
        raise BadKubeconfig(
            f"the kubeconfig is over {MAX_BYTES // 1024} KiB: is it the right file?"
        )
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadKubeconfig(f"the kubeconfig is not YAML ({exc.__class__.__name__})") from None
    if not isinstance(config, dict) or not config.get("clusters"):
        raise BadKubeconfig("the kubeconfig has no clusters: is it a kubeconfig?")
    for entry in config.get("clusters") or []:
        name = (entry or {}).get("name", "?")
        cluster = (entry or {}).get("cluster") or {}
        for key, fix in _CLUSTER_REFUSED.items():
            if cluster.get(key):
                raise BadKubeconfig(f"cluster {name!r} sets {key}: {fix}")
        _check_server(name, cluster.get("server"))
        if "certificate-authority-data" in cluster:
            _base64(cluster["certificate-authority-data"], f"cluster {name!r}'s CA data")
    for entry in config.get("users") or []:
        name = (entry or {}).get("name", "?")
        user = (entry or {}).get("user") or {}
        for key, fix in _USER_REFUSED.items():
            if user.get(key):
                raise BadKubeconfig(f"user {name!r} sets {key}: {fix}")
        for key in ("client-certificate-data", "client-key-data"):
            if key in user:
                _base64(user[key], f"user {name!r}'s {key}")
    current = config.get("current-context")
    if not current:
        raise BadKubeconfig("the kubeconfig has no current-context; set the one to use")
    context = _named(config, "contexts", current, "context")
    cluster = _named(config, "clusters", context.get("cluster", ""), "cluster")
    user = _named(config, "users", context.get("user", ""), "user")
    has_certificate = user.get("client-certificate-data") and user.get("client-key-data")
    if not (user.get("token") or has_certificate):
        raise BadKubeconfig(
            f"user {context.get('user')!r} has no token and no client certificate: the portal "
            "and MultiKueue would call the worker anonymously"
        )
    return Kubeconfig(server=cluster["server"], context=current, user=context["user"])


def kubeconfig_of_secret(secret: dict | None, where: str) -> str:
    """The kubeconfig text of a Secret as the API server returns it (`data` is base64); raises
    `BadKubeconfig` when the Secret is missing or holds no `kubeconfig` key."""
    if secret is None:
        raise BadKubeconfig(
            f"there is no Secret {where}: create it with the worker's kubeconfig under the key "
            f"{SECRET_KEY!r}"
        )
    encoded = (secret.get("data") or {}).get(SECRET_KEY)
    if not encoded:
        raise BadKubeconfig(f"the Secret {where} has no key {SECRET_KEY!r}, which MultiKueue reads")
    try:
        return base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, ValueError):
        raise BadKubeconfig(f"the Secret {where}'s {SECRET_KEY!r} is not base64 text") from None
