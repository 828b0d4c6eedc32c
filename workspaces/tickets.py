"""The way into a workspace's own origin: the portal checks the person, then sends the browser
to the workspace's host with a one-time signed ticket; the proxy there exchanges it (with the
portal, over the cluster's network) for a host-only workspace cookie, whose value is a signed
session the proxy shows the portal again on every check. The portal's own cookies never travel.

Tickets live WORKSPACE_TICKET_MAX_AGE_S and are spent on first use (the cache every process
shares remembers each spent one); sessions live WORKSPACE_SESSION_MAX_AGE_S. Both name the
workspace, so one workspace's ticket or cookie opens no other."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core import signing
from django.core.cache import cache

TICKET_SALT = "gpu-portal.workspace-ticket"
SESSION_SALT = "gpu-portal.workspace-session"


class Refused(Exception):
    """A ticket or session that opens nothing; the message says why (for the proxy's log)."""


def mint_ticket(workspace_id: int, user_id: int) -> str:
    payload = {"w": workspace_id, "u": user_id, "n": secrets.token_urlsafe(16)}
    return signing.dumps(payload, salt=TICKET_SALT, compress=True)


def _load(value: object, salt: str, max_age: int, what: str) -> dict:
    if not isinstance(value, str) or not value or len(value) > 1000:
        raise Refused(f"no {what}")
    try:
        data = signing.loads(value, salt=salt, max_age=max_age)
    except signing.SignatureExpired:
        raise Refused(f"the {what} is too old") from None
    except signing.BadSignature:
        raise Refused(f"the {what} is not the portal's") from None
    if not isinstance(data, dict) or not isinstance(data.get("w"), int):
        raise Refused(f"the {what} is not the portal's")
    return data


def redeem_ticket(ticket: object, workspace_id: int) -> int:
    """The user id the ticket was minted for; spent now. Refused: forged, too old, spent, or
    minted for another workspace."""
    data = _load(ticket, TICKET_SALT, settings.WORKSPACE_TICKET_MAX_AGE_S, "ticket")
    if data["w"] != workspace_id:
        raise Refused("the ticket is for another workspace")
    spent_for = settings.WORKSPACE_TICKET_MAX_AGE_S + 60
    if not cache.add(f"workspace-ticket:{data.get('n')}", 1, timeout=spent_for):
        raise Refused("the ticket was used already")
    return int(data["u"])


def session_value(workspace_id: int, user_id: int) -> str:
    return signing.dumps({"w": workspace_id, "u": user_id}, salt=SESSION_SALT, compress=True)


def read_session(value: object, workspace_id: int) -> int:
    """The user id of a workspace cookie's session for this workspace."""
    data = _load(value, SESSION_SALT, settings.WORKSPACE_SESSION_MAX_AGE_S, "session")
    if data["w"] != workspace_id:
        raise Refused("the session is for another workspace")
    return int(data["u"])
