"""Short-lived encryption of a secret the portal must hold for a moment (a new API token's
secret between the POST that made it and the page that shows it once): Fernet (AES-128-CBC with
HMAC-SHA256) under a key derived from SECRET_KEY and the purpose, with a maximum age, so what
rests in the session store is never the secret in plain text and is worthless after it."""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


def _fernet(purpose: str) -> Fernet:
    key = hashlib.sha256(f"gpu-portal.sealing:{purpose}:{settings.SECRET_KEY}".encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def seal(secret: str, *, purpose: str) -> str:
    return _fernet(purpose).encrypt(secret.encode()).decode()


def unseal(sealed: object, *, purpose: str, max_age_s: int) -> str | None:
    """The secret, or None when the value is not one sealed for `purpose`, or is too old."""
    if not isinstance(sealed, str):
        return None
    try:
        return _fernet(purpose).decrypt(sealed.encode(), ttl=max_age_s).decode()
    except (InvalidToken, ValueError):
        return None
