"""Metering: allocation intervals from the cluster, usage samples and rollups, prices, budgets.

Everything is stored in UTC. Allocation intervals are the source of truth for held GPUs (exact
arithmetic in `metering.pricing`); samples add what was really used, minute by minute, and roll
up into hourly and daily rows for dashboards and the idle part of statements.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from core.querysets import TenantScopedQuerySet


class AllocationIntervalQuerySet(TenantScopedQuerySet):
    def with_seen_until(self):
        """Annotate `seen_until`: the end of a closed interval, or for an open one the last
        ingest of its cluster (every open interval was seen there, see IngestCursor)."""
        cursor = IngestCursor.objects.filter(cluster_id=models.OuterRef("cluster_id")).values(
            "last_at"
        )[:1]
        return self.annotate(
            seen_until=models.Case(
                models.When(
                    ended_at__isnull=True,
                    then=Coalesce(
                        models.Subquery(cursor, output_field=models.DateTimeField()),
                        models.F("last_seen_at"),
                    ),
                ),
                default=models.F("ended_at"),
                output_field=models.DateTimeField(),
            )
        )


class IngestCursor(models.Model):
    """When the ingest last listed a cluster's pods. Every interval still open was seen then, so
    the ingest writes one row a minute instead of touching every open interval."""

    cluster = models.OneToOneField("scheduler.Cluster", on_delete=models.CASCADE, related_name="+")
    last_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.cluster_id} @ {self.last_at}"


class AllocationInterval(models.Model):
    """One pod holding units of one GPU resource from `started_at` until `ended_at` (open: null).

    `last_seen_at` is when the ingest last wrote the row (opened, reopened, closed); an open
    interval was also seen at its cluster's IngestCursor. A pod that vanishes is closed at the
    last ingest that saw it (or at its containers' finish time when the cluster still tells it)."""

    class EndReason(models.TextChoices):
        RUNNING = "", "Running"
        DELETED = "deleted", "Deleted"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        PREEMPTED = "preempted", "Preempted"

    # Billing history: a cluster row with intervals cannot be deleted (archive it instead).
    cluster = models.ForeignKey("scheduler.Cluster", on_delete=models.PROTECT, related_name="+")
    pod_uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63)
    pod_name = models.CharField(max_length=253)
    node_name = models.CharField(max_length=253)
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    resource_class = models.ForeignKey(
        "scheduler.ResourceClass", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    workload = models.ForeignKey(
        "scheduler.Workload", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resource_name = models.CharField(max_length=63)
    gpu_model = models.CharField(max_length=64, blank=True)
    units = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(
        max_length=10, choices=EndReason.choices, blank=True, default=EndReason.RUNNING
    )
    # Utilisation seen by Prometheus: the mean is util_sum / util_samples (fraction 0-1).
    util_sum = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal(0))
    util_samples = models.PositiveIntegerField(default=0)
    util_at = models.DateTimeField(null=True, blank=True)
    fb_used_mib = models.PositiveIntegerField(null=True, blank=True)

    objects = AllocationIntervalQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "pod_uid", "resource_name"], name="unique_pod_resource_interval"
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=models.F("started_at")),
                name="interval_ends_after_start",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "started_at"]),
            models.Index(
                fields=["cluster"], condition=Q(ended_at__isnull=True), name="open_interval_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod_name} {self.units}×{self.resource_name}"

    @property
    def util_mean(self) -> Decimal | None:
        if not self.util_samples:
            return None
        return self.util_sum / self.util_samples


class UsageSample(models.Model):
    """One minute of one tenant and resource class: units allocated, units' worth used (where
    utilisation is known) and units held in quota. Raw; kept RAW_SAMPLE_RETENTION_DAYS."""

    at = models.DateTimeField()
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    resource_class = models.ForeignKey(
        "scheduler.ResourceClass", on_delete=models.PROTECT, related_name="+"
    )
    allocated = models.DecimalField(max_digits=12, decimal_places=4, default=Decimal(0))
    known = models.DecimalField(
        max_digits=12, decimal_places=4, default=Decimal(0), help_text="allocated with known use"
    )
    used = models.DecimalField(max_digits=12, decimal_places=4, default=Decimal(0))
    quota = models.DecimalField(max_digits=12, decimal_places=4, default=Decimal(0))

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-at"]
        constraints = [
            models.UniqueConstraint(
                fields=["at", "tenant", "resource_class"], name="unique_usage_sample"
            )
        ]
        indexes = [models.Index(fields=["at"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.tenant_id}/{self.resource_class_id}"


class UsageRollup(models.Model):
    """Hourly or daily sums of samples, in unit-hours."""

    class Period(models.TextChoices):
        HOUR = "hour", "Hour"
        DAY = "day", "Day"

    period = models.CharField(max_length=4, choices=Period.choices)
    start = models.DateTimeField()
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    resource_class = models.ForeignKey(
        "scheduler.ResourceClass", on_delete=models.PROTECT, related_name="+"
    )
    gpu_model = models.CharField(max_length=64)
    allocated_hours = models.DecimalField(max_digits=14, decimal_places=4, default=Decimal(0))
    known_hours = models.DecimalField(max_digits=14, decimal_places=4, default=Decimal(0))
    used_hours = models.DecimalField(max_digits=14, decimal_places=4, default=Decimal(0))
    quota_hours = models.DecimalField(max_digits=14, decimal_places=4, default=Decimal(0))
    gpu_fraction = models.DecimalField(max_digits=6, decimal_places=4, default=Decimal(1))
    samples = models.PositiveIntegerField(default=0)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-start"]
        constraints = [
            models.UniqueConstraint(
                fields=["period", "start", "tenant", "resource_class"], name="unique_usage_rollup"
            )
        ]
        indexes = [
            models.Index(fields=["period", "start"]),
            models.Index(fields=["tenant", "period", "start"]),
        ]

    def __str__(self) -> str:
        return f"{self.period} {self.start:%Y-%m-%d %H:%M} {self.tenant_id}"


class PriceRule(models.Model):
    """A resource class's price from `effective_from` on, until the next rule. Before the first
    rule the class's own price_per_hour applies (MIG: the GPU's price × compute slices / 7)."""

    resource_class = models.ForeignKey(
        "scheduler.ResourceClass", on_delete=models.PROTECT, related_name="price_rules"
    )
    price_per_hour = models.DecimalField(
        max_digits=10, decimal_places=4, validators=[MinValueValidator(Decimal(0))]
    )
    effective_from = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["resource_class_id", "effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["resource_class", "effective_from"], name="unique_price_rule"
            )
        ]

    def __str__(self) -> str:
        return f"{self.resource_class_id}: {self.price_per_hour}/h from {self.effective_from}"


class Budget(models.Model):
    """A tenant's budget for one month (first day of the month); without a row the tenant's
    monthly_budget applies."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="budgets")
    month = models.DateField(help_text="First day of the month")
    amount = models.DecimalField(
        max_digits=12, decimal_places=2, validators=[MinValueValidator(Decimal(0))]
    )

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-month"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "month"], name="unique_budget_month")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.month:%Y-%m}: {self.amount}"


class BudgetAlert(models.Model):
    """A warning sent once per tenant, month, kind and threshold: spend at 80 or 100 % of the
    budget, or the month-end forecast over 100 %."""

    class Kind(models.TextChoices):
        SPEND = "spend", "Spend reached a threshold"
        FORECAST = "forecast", "Forecast over the budget"

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    month = models.DateField()
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.SPEND)
    threshold = models.PositiveSmallIntegerField()
    cost = models.DecimalField(max_digits=14, decimal_places=2)
    budget = models.DecimalField(max_digits=12, decimal_places=2)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "month", "kind", "threshold"], name="unique_budget_alert"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.month:%Y-%m} {self.threshold}%"


class ModelRollup(models.Model):
    """Per GPU model and UTC day, over all tenants, in GPU-equivalent hours: what the platform
    dashboard draws (a year is 365 rows per model, whatever the number of tenants)."""

    start = models.DateTimeField()
    gpu_model = models.CharField(max_length=64)
    allocated_gpu_hours = models.DecimalField(max_digits=16, decimal_places=4, default=Decimal(0))
    known_gpu_hours = models.DecimalField(max_digits=16, decimal_places=4, default=Decimal(0))
    used_gpu_hours = models.DecimalField(max_digits=16, decimal_places=4, default=Decimal(0))
    quota_gpu_hours = models.DecimalField(max_digits=16, decimal_places=4, default=Decimal(0))

    class Meta:
        ordering = ["start", "gpu_model"]
        constraints = [
            models.UniqueConstraint(fields=["start", "gpu_model"], name="unique_model_rollup")
        ]

    def __str__(self) -> str:
        return f"{self.gpu_model} {self.start:%Y-%m-%d}"


class DepartmentBudgetAlert(models.Model):
    """A warning to a department's admins, sent once per department, month, kind and threshold:
    its teams' spend at 80 or 100 % of the department's budget, or its month-end forecast over."""

    department = models.ForeignKey("tenants.Department", on_delete=models.CASCADE, related_name="+")
    month = models.DateField()
    kind = models.CharField(
        max_length=8, choices=BudgetAlert.Kind.choices, default=BudgetAlert.Kind.SPEND
    )
    threshold = models.PositiveSmallIntegerField()
    cost = models.DecimalField(max_digits=14, decimal_places=2)
    budget = models.DecimalField(max_digits=12, decimal_places=2)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["department", "month", "kind", "threshold"],
                name="unique_department_budget_alert",
            )
        ]

    def __str__(self) -> str:
        return f"{self.department_id} {self.month:%Y-%m} {self.kind} {self.threshold}%"
