"""How long each kind of record is kept, and the periodic purge of what is older.

Each kind has a setting in days (docs/configuration.md): a whole number, 1 or more; anything else
stops the portal at start-up (a system check) and the purge. The purge deletes in batches, each
its own transaction, so a run cut short by its time limit keeps what it did and the next run goes
on; run twice, the second finds nothing. Each kind purged is one `retention.purged` audit event.
The audit log itself is purged through its chain (`tenants.audit_chain`): a prefix at a time,
each cut recorded with the digest it cut at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models, transaction
from django.utils import timezone

from core import audit
from metering.models import AllocationInterval
from scheduler.health.models import HealthEvent
from scheduler.workloads.models import WorkloadEvent
from tenants import audit_chain
from tenants.models import AuditEvent, NotificationDelivery

PURGED_VERB = "retention.purged"


@dataclass(frozen=True)
class Kind:
    name: str
    setting: str  # the environment variable, for messages
    expired: Callable[[datetime], models.QuerySet] | None  # None: the audit chain's own purge


KINDS = (
    Kind("audit", "RETENTION_AUDIT_DAYS", None),
    Kind(
        "workload_events",
        "RETENTION_WORKLOAD_EVENTS_DAYS",
        lambda cutoff: WorkloadEvent.objects.filter(created_at__lt=cutoff),
    ),
    Kind(
        "notification_deliveries",
        "RETENTION_NOTIFICATION_DELIVERIES_DAYS",
        # a delivery still pending is work to do, whatever its age
        lambda cutoff: NotificationDelivery.objects.filter(created_at__lt=cutoff).exclude(
            state=NotificationDelivery.State.PENDING
        ),
    ),
    Kind(
        "health_events",
        "RETENTION_HEALTH_EVENTS_DAYS",
        # closed ones only (an open event is a GPU still sick); their impacts go with them
        lambda cutoff: HealthEvent.objects.filter(closed_at__lt=cutoff),
    ),
    Kind(
        "allocation_intervals",
        "RETENTION_ALLOCATION_INTERVALS_DAYS",
        lambda cutoff: AllocationInterval.objects.filter(ended_at__lt=cutoff),
    ),
)


def check_retention_days(configured: Mapping[str, object], raw_samples: object) -> dict[str, int]:
    """The periods in days, or ImproperlyConfigured naming the setting to change. Pure."""
    unknown = sorted(set(configured) - {kind.name for kind in KINDS})
    if unknown:
        raise ImproperlyConfigured(f"RETENTION_DAYS has unknown kinds: {', '.join(unknown)}")
    days: dict[str, int] = {}
    named = [(kind.name, kind.setting, configured.get(kind.name)) for kind in KINDS]
    for name, setting, value in [
        *named,
        ("usage_samples", "RAW_SAMPLE_RETENTION_DAYS", raw_samples),
    ]:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ImproperlyConfigured(
                f"{setting} must be a whole number of days, 1 or more (it is {value!r}); "
                "records cannot be kept for less than a day, nor forever"
            )
        days[name] = value
    return days


def retention_days() -> dict[str, int]:
    return check_retention_days(settings.RETENTION_DAYS, settings.RAW_SAMPLE_RETENTION_DAYS)


def _record(kind: str, days: int, cutoff: datetime, deleted: int) -> None:
    audit.record(
        actor=None,
        verb=PURGED_VERB,
        obj=None,
        tenant=None,
        object_type="retention",
        after={"kind": kind, "days": days, "older_than": cutoff.isoformat(), "deleted": deleted},
    )


def purge_rows(expired: models.QuerySet, batch: int) -> int:
    deleted = 0
    while ids := list(expired.order_by("pk").values_list("pk", flat=True)[:batch]):
        with transaction.atomic():
            expired.model.objects.filter(pk__in=ids).delete()  # with what cascades from them
        deleted += len(ids)
    return deleted


def purge_audit(cutoff: datetime, batch: int) -> int:
    """Delete the chain's oldest places created before `cutoff`, a prefix at a time, never its
    head (the next seal goes on from it); each cut is an `audit.purged` event holding the place
    and digest it cut at, where verification starts again. Only places that were there when the
    run began are cut (not the run's own cuts)."""
    sealed = AuditEvent.objects.filter(chain_seq__isnull=False).order_by("chain_seq")
    places = sealed.values_list("chain_seq", flat=True)
    with transaction.atomic():
        audit_chain.lock_chain()
        audit_chain.seal_locked()
        top, _ = audit_chain.head()
        young = places.filter(created_at__gte=cutoff).first()
    stop = min(top, young if young is not None else top) - 1
    deleted = 0
    while True:
        with transaction.atomic():
            audit_chain.lock_chain()
            first = places.first()
            if first is None or first > stop:
                return deleted
            upto = min(stop, first + batch - 1)
            digest = sealed.get(chain_seq=upto).chain_digest
            audit_chain.allow("purge")
            count, _ = AuditEvent.objects.filter(chain_seq__lte=upto).delete()
            audit.record(
                actor=None,
                verb=audit_chain.PURGED_VERB,
                obj=None,
                tenant=None,
                object_type="retention",
                after={
                    "through_seq": upto,
                    "digest": digest,
                    "deleted": count,
                    "older_than": cutoff.isoformat(),
                },
            )
        deleted += count


def purge_expired(now: datetime | None = None) -> dict[str, int]:
    """One run of the purge: how many rows of each kind went."""
    days = retention_days()
    now = now or timezone.now()
    batch = settings.RETENTION_PURGE_BATCH
    purged: dict[str, int] = {}
    for kind in KINDS:
        cutoff = now - timedelta(days=days[kind.name])
        if kind.expired is None:
            purged[kind.name] = purge_audit(cutoff, batch)
            continue
        purged[kind.name] = count = purge_rows(kind.expired(cutoff), batch)
        if count:
            _record(kind.name, days[kind.name], cutoff, count)
    return purged
