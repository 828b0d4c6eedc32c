"""Capacity and its grants: the auto-approval envelope, capacity requests and their items (with
the request's state machine), and the quota grants approvals create."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.errors import InvalidTransition
from core.querysets import TenantScopedQuerySet
from tenants.models.tenants import Tenant


class AutoApprovalRule(models.Model):
    """The policy envelope: asks within it are approved at once, without a platform admin."""

    resource_class = models.OneToOneField(
        "scheduler.ResourceClass", on_delete=models.CASCADE, related_name="auto_approval"
    )
    max_amount = models.PositiveIntegerField(help_text="Largest amount approved automatically")
    max_duration_hours = models.PositiveIntegerField(
        help_text="Longest grant approved automatically (open-ended asks never are)"
    )

    def __str__(self) -> str:
        return (
            f"auto-approve ≤{self.max_amount} {self.resource_class} for ≤{self.max_duration_hours}h"
        )


class CapacityRequestQuerySet(TenantScopedQuerySet):
    pass


class CapacityRequest(models.Model):
    class State(models.TextChoices):
        SUBMITTED = "submitted", "Submitted"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        CANCELLED = "cancelled", "Cancelled"
        PROVISIONED = "provisioned", "Provisioned"
        EXPIRED = "expired", "Expired"

    # action -> (states it may start from, state it leads to)
    TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
        "approve": (frozenset({State.SUBMITTED}), State.APPROVED),
        "reject": (frozenset({State.SUBMITTED}), State.REJECTED),
        "cancel": (
            frozenset({State.SUBMITTED, State.APPROVED, State.PROVISIONED}),
            State.CANCELLED,
        ),
        "provision": (frozenset({State.APPROVED}), State.PROVISIONED),
        "expire": (frozenset({State.APPROVED, State.PROVISIONED}), State.EXPIRED),
    }

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="capacity_requests")
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="capacity_requests"
    )
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True, help_text="Empty: open-ended")
    justification = models.TextField()
    state = models.CharField(max_length=12, choices=State.choices, default=State.SUBMITTED)
    auto_approved = models.BooleanField(default=False)
    policy_reasons = models.JSONField(
        default=list, blank=True, help_text="Why the policy sent it to the platform team"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True)
    extends = models.ForeignKey(
        "QuotaGrant",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="renewals",
        help_text="A renewal: approving it moves this grant's end (the same grant, no gap)",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    objects = CapacityRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "created_at"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__isnull=True) | Q(ends_at__gt=models.F("starts_at")),
                name="request_ends_after_start",
            )
        ]

    def __str__(self) -> str:
        return f"request #{self.pk} of {self.tenant}"

    def can(self, action: str) -> bool:
        return self.state in self.TRANSITIONS[action][0]

    @property
    def is_renewal(self) -> bool:
        return self.extends_id is not None

    def transition(self, action: str) -> None:
        """Move to the state `action` leads to, or raise InvalidTransition."""
        allowed, target = self.TRANSITIONS[action]
        if self.state not in allowed:
            raise InvalidTransition(
                f"cannot {action} request #{self.pk}: it is {self.state}; "
                f"{action} is allowed only when {' or '.join(sorted(allowed))}"
            )
        self.state = target


class CapacityRequestItem(models.Model):
    request = models.ForeignKey(CapacityRequest, on_delete=models.CASCADE, related_name="items")
    resource_class = models.ForeignKey("scheduler.ResourceClass", on_delete=models.PROTECT)
    amount = models.PositiveIntegerField(validators=[MinValueValidator(1)])

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["request", "resource_class"], name="one_item_per_class"
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="item_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.amount} × {self.resource_class}"


class QuotaGrantQuerySet(TenantScopedQuerySet):
    def holding(self, now=None) -> QuotaGrantQuerySet:
        """Grants that still hold capacity (now or later): what the pool has handed out."""
        now = now or timezone.now()
        return self.filter(state=QuotaGrant.State.ACTIVE).filter(
            Q(ends_at__isnull=True) | Q(ends_at__gt=now)
        )

    def effective(self, now=None) -> QuotaGrantQuerySet:
        """Grants in force at `now`: their sum is the tenant's effective quota."""
        now = now or timezone.now()
        return self.holding(now).filter(starts_at__lte=now)


class QuotaGrant(models.Model):
    class State(models.TextChoices):
        ACTIVE = "active", "Active"
        EXPIRED = "expired", "Expired"
        REVOKED = "revoked", "Revoked"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="grants")
    resource_class = models.ForeignKey(
        "scheduler.ResourceClass", on_delete=models.PROTECT, related_name="grants"
    )
    amount = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True)
    request = models.ForeignKey(
        CapacityRequest, null=True, blank=True, on_delete=models.PROTECT, related_name="grants"
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.ACTIVE)
    # Where the grant's work runs (tenants/placement.py): "" the portal's own cluster,
    # "cluster:<worker>" one worker, "group:<group>" any worker of a group (MultiKueue).
    placement = models.CharField(max_length=60, blank=True, default="")
    expiry_warned_at = models.DateTimeField(null=True, blank=True)
    # A grant booked ahead (its start later than its making): when its team was told that its
    # window started (tenants.services.bookings), once.
    start_notified_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    objects = QuotaGrantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "ends_at"])]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="grant_amount_positive")
        ]

    def __str__(self) -> str:
        return f"{self.amount} × {self.resource_class} for {self.tenant}"

    def end(self, state: str, at) -> None:
        if self.state != self.State.ACTIVE:
            raise InvalidTransition(f"grant #{self.pk} is already {self.state}")
        self.state = state
        self.ended_at = at
