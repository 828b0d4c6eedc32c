"""Departments: an optional level over teams (research, product, a business unit). A department
has admins who approve its teams' asks within its quota, its own quota per GPU model in compute
slices (as grants are counted), a budget, an approval policy and envelope of its own, and teams.
On the cluster it is a Kueue Cohort under the organisation's, so its teams borrow each other's
idle units before anyone else's (scheduler/cluster/render/cohorts.py)."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.permissions import is_platform_admin
from tenants.models.tenants import dns_label


class DepartmentQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Platform admins see every department; others those they administer or one of whose
        teams they are a member of."""
        if is_platform_admin(user):
            return self
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(Q(admins=user) | Q(teams__memberships__user=user)).distinct()


class Department(models.Model):
    slug = models.CharField(max_length=40, unique=True, validators=[dns_label])
    name = models.CharField(max_length=120)
    cost_centre = models.CharField(max_length=40, blank=True)
    monthly_budget = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Per month, over all its teams; empty: none",
    )
    auto_approve = models.BooleanField(
        default=True,
        help_text="Asks of its teams inside the envelope (the department's, else the "
        "platform's) are approved at once; off: its admins decide every ask",
    )
    admins = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="administered_departments"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = DepartmentQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class DepartmentQuota(models.Model):
    """What the department's teams may be granted of one GPU model together, in compute slices
    (a whole GPU is 7), and how it shares with the rest of the organisation on the cluster."""

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="quotas")
    gpu_model = models.CharField(max_length=40, help_text="Catalog key, e.g. A100-80GB")
    slices = models.PositiveIntegerField(help_text="Most slices its teams may hold in grants")
    lending_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Most idle slices the department lends to other departments (empty: all "
        "idle; 0: none)",
    )
    borrowing_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Most slices its teams borrow from other departments (empty: no limit)",
    )

    class Meta:
        ordering = ["department__slug", "gpu_model"]
        constraints = [
            models.UniqueConstraint(
                fields=["department", "gpu_model"], name="unique_department_quota"
            )
        ]

    def __str__(self) -> str:
        return f"{self.department}: {self.slices} slices of {self.gpu_model}"


class DepartmentEnvelope(models.Model):
    """The department's own auto-approval envelope of a class: it replaces the platform's
    (`AutoApprovalRule`) for its teams."""

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="envelopes")
    resource_class = models.ForeignKey("scheduler.ResourceClass", on_delete=models.CASCADE)
    max_amount = models.PositiveIntegerField(help_text="Largest amount approved automatically")
    max_duration_hours = models.PositiveIntegerField(
        help_text="Longest grant approved automatically"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["department", "resource_class"], name="unique_department_envelope"
            )
        ]

    def __str__(self) -> str:
        return f"{self.department}: ≤{self.max_amount} {self.resource_class}"
