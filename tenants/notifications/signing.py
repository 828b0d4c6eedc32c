"""Webhook secrets and signatures: pure functions (plus the key from settings).

A channel's signing secret must be read back to sign each delivery, so it cannot be stored as a
one-way hash; it is stored encrypted (Fernet: AES-128-CBC with HMAC-SHA256) under
NOTIFICATION_SECRET_KEY, and shown once, when the channel is created."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

SIGNATURE_HEADER = "X-Portal-Signature-256"


def _fernet() -> Fernet:
    key = settings.NOTIFICATION_SECRET_KEY or f"notification-secret:{settings.SECRET_KEY}"
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(key.encode()).digest()))


def new_secret() -> str:
    return f"whsec_{secrets.token_urlsafe(32)}"


def encrypt_secret(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode()


def decrypt_secret(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise ValueError(
            "the channel's secret cannot be decrypted (NOTIFICATION_SECRET_KEY changed?); "
            "recreate the channel"
        ) from None


def sign(secret: str, body: bytes) -> str:
    """The signature header's value: `sha256=` and the hex HMAC-SHA256 of the exact body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str) -> bool:
    """What a receiver does (and the tests): compare in constant time."""
    return hmac.compare_digest(sign(secret, body), header or "")
