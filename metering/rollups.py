"""Minute samples into hourly rows, hourly rows into daily rows (UTC), incrementally; and the
retention of raw samples. Each step recomputes from its watermark (the newest row it wrote) to
now, with upserts, so running it twice or after a gap is harmless."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Count, DecimalField, ExpressionWrapper, F, Max, Min, Sum
from django.db.models.functions import TruncDay, TruncHour
from django.utils import timezone

from catalog.models import ResourceClass
from metering.models import ModelRollup, UsageRollup, UsageSample

MINUTE = Decimal(1) / 60
FIELDS = ["allocated_hours", "known_hours", "used_hours", "quota_hours", "samples"]


def _upsert(rows: list[UsageRollup]) -> None:
    UsageRollup.objects.bulk_create(
        rows,
        batch_size=2000,
        update_conflicts=True,
        unique_fields=["period", "start", "tenant", "resource_class"],
        update_fields=[*FIELDS, "gpu_model", "gpu_fraction"],
    )


def _classes() -> dict[int, tuple[str, Decimal]]:
    return {
        pk: (m, f)
        for pk, m, f in ResourceClass.objects.values_list("pk", "gpu_model", "gpu_fraction")
    }


def _watermark(period: str) -> datetime | None:
    return UsageRollup.objects.filter(period=period).aggregate(m=Max("start"))["m"]


@transaction.atomic
def roll_up_hours(now: datetime | None = None) -> int:
    """Hourly rows from the newest hour already rolled up (it may have grown) to now."""
    since = _watermark(UsageRollup.Period.HOUR)
    if since is None:
        since = UsageSample.objects.aggregate(m=Min("at"))["m"]
        if since is None:
            return 0
    since = since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    classes = _classes()
    rows = []
    for row in (
        UsageSample.objects.filter(at__gte=since, at__lte=now or timezone.now())
        .annotate(hour=TruncHour("at", tzinfo=UTC))
        .values("hour", "tenant_id", "resource_class_id")
        .annotate(a=Sum("allocated"), k=Sum("known"), u=Sum("used"), q=Sum("quota"), n=Count("id"))
    ):
        model, fraction = classes[row["resource_class_id"]]
        rows.append(
            UsageRollup(
                period=UsageRollup.Period.HOUR,
                start=row["hour"],
                tenant_id=row["tenant_id"],
                resource_class_id=row["resource_class_id"],
                gpu_model=model,
                gpu_fraction=fraction,
                allocated_hours=(row["a"] * MINUTE).quantize(Decimal("0.0001")),
                known_hours=(row["k"] * MINUTE).quantize(Decimal("0.0001")),
                used_hours=(row["u"] * MINUTE).quantize(Decimal("0.0001")),
                quota_hours=(row["q"] * MINUTE).quantize(Decimal("0.0001")),
                samples=row["n"],
            )
        )
    _upsert(rows)
    return len(rows)


@transaction.atomic
def roll_up_days(now: datetime | None = None) -> int:
    since = _watermark(UsageRollup.Period.DAY)
    hours = UsageRollup.objects.filter(period=UsageRollup.Period.HOUR)
    if since is None:
        since = hours.aggregate(m=Min("start"))["m"]
        if since is None:
            return 0
    since = since.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    classes = _classes()
    rows = []
    for row in (
        hours.filter(start__gte=since, start__lte=now or timezone.now())
        .annotate(day=TruncDay("start", tzinfo=UTC))
        .values("day", "tenant_id", "resource_class_id")
        .annotate(
            a=Sum("allocated_hours"),
            k=Sum("known_hours"),
            u=Sum("used_hours"),
            q=Sum("quota_hours"),
            n=Sum("samples"),
        )
    ):
        model, fraction = classes[row["resource_class_id"]]
        rows.append(
            UsageRollup(
                period=UsageRollup.Period.DAY,
                start=row["day"],
                tenant_id=row["tenant_id"],
                resource_class_id=row["resource_class_id"],
                gpu_model=model,
                gpu_fraction=fraction,
                allocated_hours=row["a"],
                known_hours=row["k"],
                used_hours=row["u"],
                quota_hours=row["q"],
                samples=row["n"],
            )
        )
    _upsert(rows)
    _roll_up_models(since, now)
    return len(rows)


def _gpu(field: str):
    return ExpressionWrapper(
        F(field) * F("gpu_fraction"), output_field=DecimalField(max_digits=20, decimal_places=8)
    )


def _roll_up_models(since: datetime, now: datetime | None) -> None:
    """Per GPU model and day, from the daily rows just written."""
    rows = [
        ModelRollup(
            start=row["start"],
            gpu_model=row["gpu_model"],
            allocated_gpu_hours=row["a"].quantize(Decimal("0.0001")),
            known_gpu_hours=row["k"].quantize(Decimal("0.0001")),
            used_gpu_hours=row["u"].quantize(Decimal("0.0001")),
            quota_gpu_hours=row["q"].quantize(Decimal("0.0001")),
        )
        for row in UsageRollup.objects.filter(
            period=UsageRollup.Period.DAY, start__gte=since, start__lte=now or timezone.now()
        )
        .values("start", "gpu_model")
        .annotate(
            a=Sum(_gpu("allocated_hours")),
            k=Sum(_gpu("known_hours")),
            u=Sum(_gpu("used_hours")),
            q=Sum(_gpu("quota_hours")),
        )
    ]
    ModelRollup.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["start", "gpu_model"],
        update_fields=[
            "allocated_gpu_hours",
            "known_gpu_hours",
            "used_gpu_hours",
            "quota_gpu_hours",
        ],
    )


def purge_samples(now: datetime | None = None) -> int:
    """Delete raw samples older than the retention that are already rolled up."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.RAW_SAMPLE_RETENTION_DAYS)
    rolled = _watermark(UsageRollup.Period.HOUR)
    if rolled is None:
        return 0
    deleted, _ = UsageSample.objects.filter(at__lt=min(cutoff, rolled)).delete()
    return deleted
