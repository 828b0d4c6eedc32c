"""Audit rows, written by services inside their own transaction (never by signals)."""

from __future__ import annotations

from typing import Any

from django.db import models

from core.request_context import get_request_id
from tenants.models import AuditEvent, Tenant

SYSTEM_ACTOR = "system"


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
    tenant: Tenant | None,
    before: dict | None = None,
    after: dict | None = None,
    object_type: str | None = None,
) -> AuditEvent:
    actor_user = actor if getattr(actor, "is_authenticated", False) else None
    return AuditEvent.objects.create(
        actor=actor_user,
        actor_repr=actor_user.get_username() if actor_user else SYSTEM_ACTOR,
        tenant=tenant,
        verb=verb,
        object_type=object_type or (obj._meta.label if obj is not None else ""),
        object_id=str(obj.pk) if obj is not None and obj.pk is not None else "",
        object_repr=str(obj)[:200] if obj is not None else "",
        before=before,
        after=after,
        request_id=get_request_id() or "",
    )
