"""The proxy's settings, from its environment (docs/configuration.md, "Workspace proxy")."""

from __future__ import annotations

import os
from dataclasses import dataclass

COOKIE = "__Host-gpu-portal-ws"
# The portal's cookies under any of their names (PORTAL_HOST_COOKIES renames them): never passed.
PORTAL_COOKIES = ("sessionid", "csrftoken", "__Host-sessionid", "__Host-csrftoken")


@dataclass(frozen=True)
class Config:
    domain: str  # WORKSPACE_DOMAIN: workspaces are w<id>.<domain>
    portal_url: str  # the portal as the proxy reaches it (enter and check)
    public_url: str  # the portal as browsers reach it (the open link)
    token: str  # WORKSPACE_PROXY_TOKEN, shown to the portal on each question
    host: str = "0.0.0.0"  # noqa: S104 - a pod's port, behind the gateway
    port: int = 8080
    recheck_s: float = 15.0  # how long one answer of the portal about a session is kept
    strip_cookies: tuple[str, ...] = PORTAL_COOKIES
    upstream_timeout_s: float = 10.0
    portal_timeout_s: float = 5.0


class ConfigError(ValueError):
    pass


def from_env(env: dict[str, str] | None = None) -> Config:
    env = dict(os.environ if env is None else env)
    missing = [
        name
        for name in ("WORKSPACE_DOMAIN", "WORKSPACE_PROXY_TOKEN", "PORTAL_BASE_URL")
        if not env.get(name, "").strip()
    ]
    if missing:
        raise ConfigError(f"set {', '.join(missing)} (docs/configuration.md, Workspace proxy)")
    public = env["PORTAL_BASE_URL"].strip().rstrip("/")
    try:
        port = int(env.get("WORKSPACE_PROXY_PORT", "8080"))
        recheck = float(env.get("WORKSPACE_PROXY_RECHECK_S", "15"))
    except ValueError:
        raise ConfigError("WORKSPACE_PROXY_PORT, WORKSPACE_PROXY_RECHECK_S: numbers") from None
    if not 0 <= port <= 65535 or not 0 <= recheck <= 300:
        raise ConfigError("WORKSPACE_PROXY_PORT: 0-65535; WORKSPACE_PROXY_RECHECK_S: 0-300")
    extra = tuple(c.strip() for c in env.get("WORKSPACE_PROXY_STRIP_COOKIES", "").split(","))
    return Config(
        domain=env["WORKSPACE_DOMAIN"].strip().lower().rstrip("."),
        portal_url=(env.get("WORKSPACE_PROXY_PORTAL_URL", "").strip() or public).rstrip("/"),
        public_url=public,
        token=env["WORKSPACE_PROXY_TOKEN"].strip(),
        host=env.get("WORKSPACE_PROXY_HOST", "0.0.0.0"),  # noqa: S104
        port=port,
        recheck_s=recheck,
        strip_cookies=PORTAL_COOKIES + tuple(c for c in extra if c),
    )
