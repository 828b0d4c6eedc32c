"""Each workspace server's own secret: generated per workspace, kept by the portal only sealed
(Fernet under a key derived from SECRET_KEY, as webhook secrets are), written into a Secret in
the team's namespace for the server to check, and handed by the portal's auth step to the proxy,
which adds it to every request it passes on. Never shown to anyone.

Jupyter reads it as its token (`JUPYTER_TOKEN`) and the proxy sends `Authorization: token …`;
code-server reads it as its hashed password (`HASHED_PASSWORD`, its SHA-256 form) and accepts a
session cookie equal to it, which the proxy sends."""

from __future__ import annotations

import base64
import hashlib
import secrets

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

SECRET_KEY_NAME = "token"  # the key in the Secret
CODE_SERVER_COOKIE = "code-server-session"
ENV_NAMES = {"jupyter": "JUPYTER_TOKEN", "code-server": "HASHED_PASSWORD"}


def _fernet() -> Fernet:
    key = hashlib.sha256(f"gpu-portal.workspace-server:{settings.SECRET_KEY}".encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def new_secret(kind: str) -> str:
    raw = secrets.token_urlsafe(32)
    # code-server compares its session cookie with its hashed password: a SHA-256 hex value
    return hashlib.sha256(raw.encode()).hexdigest() if kind == "code-server" else raw


def seal(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode()


def unseal(sealed: str) -> str | None:
    """The secret, or None when there is none or it cannot be read (SECRET_KEY changed: the
    next apply writes a new one)."""
    if not sealed:
        return None
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except (InvalidToken, ValueError):
        return None


def upstream_credentials(kind: str, secret: str) -> dict[str, dict[str, str]]:
    """What the proxy adds to each request it passes on to the server."""
    if kind == "code-server":
        return {"headers": {}, "cookies": {CODE_SERVER_COOKIE: secret}}
    return {"headers": {"Authorization": f"token {secret}"}, "cookies": {}}
