"""Writes to the catalog's resource classes that the platform team makes by hand (price, on/off).

The catalog (`scheduler.catalog`) creates the classes; it sits below governance and cannot audit,
so the platform team's edits live here, where the audit log is: one event per change, with what
it was and what it became.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.db import transaction

from core.errors import InvalidInput
from scheduler.catalog.models import ResourceClass
from tenants import audit
from tenants.permissions import require_platform_admin

EDITABLE_FIELDS = ("price_per_hour", "active")
PRICE_FIELD = ResourceClass._meta.get_field("price_per_hour")


def update_resource_class(
    *,
    actor,
    resource_class: ResourceClass,
    price_per_hour: Decimal | str | int | None = None,
    active: bool | None = None,
) -> ResourceClass:
    """Set a class's price per unit-hour and/or whether teams may ask for it. None leaves a
    field as it is; a call that changes nothing writes nothing (and no event)."""
    require_platform_admin(actor, "change resource classes")
    changes: dict[str, object] = {}
    if price_per_hour is not None:
        try:
            price = PRICE_FIELD.clean(Decimal(str(price_per_hour)), None)
        except (InvalidOperation, ValidationError) as exc:
            detail = "; ".join(getattr(exc, "messages", [])) or "price must be a number"
            raise InvalidInput(f"price: {detail}", field="price_per_hour") from None
        changes["price_per_hour"] = price
    if active is not None:
        if not isinstance(active, bool):
            raise InvalidInput("active must be true or false", field="active")
        changes["active"] = active
    with transaction.atomic():
        rc = ResourceClass.objects.select_for_update().get(pk=resource_class.pk)
        changed = [f for f, v in changes.items() if getattr(rc, f) != v]
        if changed:
            before = audit.snapshot(rc, changed)
            for f in changed:
                setattr(rc, f, changes[f])
            rc.save(update_fields=changed)
            rc.refresh_from_db(fields=changed)  # the stored (rounded) values, for the event
            audit.record(
                actor=actor,
                verb="resource_class.updated",
                obj=rc,
                tenant=None,
                before=before,
                after=audit.snapshot(rc, changed),
            )
    return rc
