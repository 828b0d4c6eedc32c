"""Notifications: the channels a tenant (or the platform team) is told through, and the log of
each delivery, which is also the queue the sender retries from."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.permissions import is_platform_admin
from core.querysets import TenantScopedQuerySet
from tenants.models.tenants import Tenant


class NotificationChannelQuerySet(TenantScopedQuerySet):
    """A tenant's channels for its members (owners change them); the platform team's (no
    tenant) for platform admins only."""


class NotificationChannel(models.Model):
    """Where a tenant's (or, without a tenant, the platform team's) notifications go."""

    class Kind(models.TextChoices):
        EMAIL = "email", "E-mail"
        WEBHOOK = "webhook", "Webhook (JSON, HMAC-SHA256 signed)"
        SLACK = "slack", "Slack-compatible incoming webhook"

    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notification_channels",
        help_text="Empty: the platform team's channel",
    )
    kind = models.CharField(max_length=10, choices=Kind.choices)
    name = models.CharField(max_length=80)
    target = models.CharField(
        max_length=500, help_text="E-mail addresses (comma-separated) or the https:// URL"
    )
    # The webhook's signing key, encrypted with NOTIFICATION_SECRET_KEY (never in plain text):
    # it must be read back to sign, so it cannot be a one-way hash; it is shown once.
    secret_encrypted = models.TextField(blank=True)
    events = models.JSONField(
        default=list, blank=True, help_text="Events sent here; empty: the default of its scope"
    )
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = NotificationChannelQuerySet.as_manager()

    class Meta:
        ordering = ["tenant__slug", "name", "id"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.name} ({self.tenant or 'platform'})"

    @property
    def shown_target(self) -> str:
        """Where it sends, as pages and the API show it (`shown_target`)."""
        return shown_target(self.kind, self.target)


def shown_target(kind: str, target: str) -> str:
    """A channel's target as anyone may read it: a Slack-compatible URL is itself the credential
    to post, so it is cut after the host (pages, the API and the audit log alike)."""
    if kind == NotificationChannel.Kind.SLACK and isinstance(target, str):
        scheme, _, rest = target.partition("://")
        return f"{scheme}://{rest.split('/', 1)[0]}/…"
    return target


# The events whose personal mail goes to the platform's approvers (tenants/notifications/events.py
# says so by their audience; a test keeps the two in step): not a team's to read.
MAIL_TO_APPROVERS = ("capacity_request.submitted", "tenant.no_owner")


class NotificationDeliveryQuerySet(TenantScopedQuerySet):
    def team_side(self) -> NotificationDeliveryQuerySet:
        """What a team sees of its deliveries: its own channels' and its people's mail, not the
        platform team's channels (their names, receivers and errors) nor mail to approvers."""
        return self.exclude(channel__isnull=False, channel__tenant__isnull=True).exclude(
            channel__isnull=True, event__in=MAIL_TO_APPROVERS
        )

    def visible_to(self, user) -> NotificationDeliveryQuerySet:
        scoped = super().visible_to(user)
        return scoped if is_platform_admin(user) else scoped.team_side()


class NotificationDelivery(models.Model):
    """One message to one channel (or, without a channel, e-mail to the people concerned):
    the delivery log, and the queue the sender retries from."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        SENT = "sent", "Sent"
        FAILED = "failed", "Failed"

    channel = models.ForeignKey(
        NotificationChannel,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="deliveries",
    )
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    event = models.CharField(max_length=60, db_index=True)
    recipients = models.JSONField(default=list, blank=True, help_text="E-mail addresses")
    subject = models.CharField(max_length=200)
    text = models.TextField()
    data = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    objects = NotificationDeliveryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]
        verbose_name_plural = "notification deliveries"

    def __str__(self) -> str:
        return f"{self.event} → {self.channel or 'people'}: {self.state}"
