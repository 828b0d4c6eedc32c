"""Audit rows, written by services inside their own transaction (never by signals).

It lives at the ground floor so that every room can audit its own writes, the catalog (below
governance) included. The row's model is governance's `tenants.AuditEvent`, looked up through
the app registry rather than imported, so this module depends on no room above it.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from django.apps import apps
from django.db import models

from core.request_context import get_request_id

SYSTEM_ACTOR = "system"

# The API token the current request acts through, with that request's id: a value left over in
# a thread from an earlier request (another id) is never taken for this one's.
_acting_token: ContextVar[tuple[str, str] | None] = ContextVar("acting_token", default=None)


def act_through_token(name: str | None) -> None:
    """Called by the API's permission check: audit rows of this request name the token."""
    request_id = get_request_id()
    _acting_token.set((request_id, name) if request_id and name else None)


def acting_token_name() -> str | None:
    current = _acting_token.get()
    if current is None or current[0] != get_request_id():
        return None
    return current[1]


def actor_label(actor_user) -> str:
    """Who, as the audit shows it: the user, and the token when the call came through one."""
    if actor_user is None:
        return SYSTEM_ACTOR
    token = acting_token_name()
    name = actor_user.get_username()
    return (f"{name} via token {token!r}" if token else name)[:150]


def snapshot(obj: models.Model, fields: list[str]) -> dict[str, Any]:
    """A JSON-safe picture of some fields of a model, for before/after."""
    out: dict[str, Any] = {}
    for name in fields:
        value = getattr(obj, name)
        if isinstance(value, models.Model):
            value = str(value)
        elif value is not None and not isinstance(value, (str, int, float, bool, list, dict)):
            value = str(value)
        out[name] = value
    return out


def record(
    *,
    actor,
    verb: str,
    obj: models.Model | None,
    tenant: models.Model | None,
    before: dict | None = None,
    after: dict | None = None,
    object_type: str | None = None,
):
    actor_user = actor if getattr(actor, "is_authenticated", False) else None
    # Typed loosely: the tenant is governance's model, which this floor does not import.
    audit_event: Any = apps.get_model("tenants", "AuditEvent")
    return audit_event.objects.create(
        actor=actor_user,
        actor_repr=actor_label(actor_user),
        tenant=tenant,
        verb=verb,
        object_type=object_type or (obj._meta.label if obj is not None else ""),
        object_id=str(obj.pk) if obj is not None and obj.pk is not None else "",
        object_repr=str(obj)[:200] if obj is not None else "",
        before=before,
        after=after,
        request_id=get_request_id() or "",
    )
