from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.errors import InvalidTransition
from core.names import namespace_name
from core.permissions import is_platform_admin
from core.querysets import TenantScopedQuerySet

dns_label = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$",
    "Use 1–40 lower-case letters, digits and '-', starting and ending with a letter or digit.",
)


@dataclass(frozen=True)
class PriorityClassDef:
    name: str
    value: int
    description: str


# The portal's priority classes, defined once: tenants are allowed some of them, workloads run
# at one, the reconciler renders them as cluster PriorityClasses.
PRIORITY_CLASS_DEFS: tuple[PriorityClassDef, ...] = (
    PriorityClassDef(
        "gpu-critical", 1_000_000, "Production inference; may preempt gpu-high and gpu-low"
    ),
    PriorityClassDef("gpu-high", 900_000, "Important training; may preempt gpu-low"),
    PriorityClassDef("gpu-low", 100_000, "Best effort and experiments; preempted first"),
)
PRIORITY_CLASSES: tuple[str, ...] = tuple(pc.name for pc in PRIORITY_CLASS_DEFS)
# The highest class may preempt every other, so a tenant runs at most `critical_gpu_quota` units
# of each GPU resource in it (as its namespace's quota counts them); the lowest is best effort,
# what a new workload is offered first.
CRITICAL_PRIORITY_CLASS: str = max(PRIORITY_CLASS_DEFS, key=lambda pc: pc.value).name
DEFAULT_PRIORITY_CLASS: str = min(PRIORITY_CLASS_DEFS, key=lambda pc: pc.value).name


class TenantQuerySet(TenantScopedQuerySet):
    tenant_path = ""  # a tenant is its own tenant


class Tenant(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        SUSPENDED = "suspended", "Suspended"
        ARCHIVED = "archived", "Archived"

    slug = models.CharField(max_length=40, unique=True, validators=[dns_label])
    name = models.CharField(max_length=120)
    cost_centre = models.CharField(max_length=40, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    monthly_budget = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="USD per month; empty: none",
    )
    gpu_ceiling = models.DecimalField(
        max_digits=8,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Most GPU-equivalents the tenant may hold in grants; empty: the platform's "
        "default (setting TENANT_DEFAULT_GPU_CEILING)",
    )
    allowed_priority_classes = models.JSONField(default=list, blank=True)
    critical_gpu_quota = models.PositiveIntegerField(
        default=0,
        help_text="GPU units of each GPU resource (whole GPUs, each MIG profile, shared "
        "replicas) the tenant may run at gpu-critical",
    )
    robot = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="robot_of",
        help_text="The tenant's CI robot user",
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.ACTIVE

    @property
    def effective_gpu_ceiling(self) -> Decimal:
        """The tenant's own ceiling, or the platform's default: no tenant holds without bound."""
        if self.gpu_ceiling is not None:
            return self.gpu_ceiling
        return Decimal(settings.TENANT_DEFAULT_GPU_CEILING)

    @property
    def namespace(self) -> str:
        """The tenant's namespace on the cluster (DNS-safe, hash-suffixed when shortened)."""
        return namespace_name(self.slug, settings.TENANT_NAMESPACE_PREFIX)

    def owner_emails(self) -> list[str]:
        """Its active owners' addresses, each once, sorted: who hears of its grants and budget
        (someone whose account is deactivated has left: their mail goes nowhere)."""
        owners = Membership.objects.filter(
            tenant=self, role=Membership.Role.OWNER, user__is_active=True
        )
        return sorted(set(owners.exclude(user__email="").values_list("user__email", flat=True)))

    _transitions = {
        "suspend": ({Status.ACTIVE}, Status.SUSPENDED),
        "resume": ({Status.SUSPENDED}, Status.ACTIVE),
        "archive": ({Status.ACTIVE, Status.SUSPENDED}, Status.ARCHIVED),
    }

    def transition(self, action: str) -> None:
        allowed, target = self._transitions[action]
        if self.status not in allowed:
            raise InvalidTransition(f"cannot {action} a tenant that is {self.status}")
        self.status = target


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        MEMBER = "member", "Member"
        VIEWER = "viewer", "Viewer"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )

    class Source(models.TextChoices):
        LOCAL = "local", "Given in the portal"
        PROVIDER = "provider", "From the identity provider's groups"

    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    # Memberships from the provider follow its groups at every sign-in (added, changed, removed);
    # local ones are the portal's and the provider never touches them.
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.LOCAL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="unique_membership")]
        ordering = ["tenant__slug", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.tenant}"

    @property
    def follows_provider(self) -> bool:
        """The identity provider's groups decide it (at every sign-in, while group mapping is
        on and well formed): changed or removed in the portal, it would come back at the next
        sign-in."""
        from tenants.group_mapping import mapping_in_force  # pure; imports no models

        return self.source == self.Source.PROVIDER and mapping_in_force() is not None


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
    expiry_warned_at = models.DateTimeField(null=True, blank=True)
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


class AuditEventQuerySet(TenantScopedQuerySet):
    """Events of the caller's tenants; events without a tenant are the platform team's."""


class AuditEvent(models.Model):
    """Append-only: a database trigger refuses UPDATE and DELETE (migration 0002)."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    actor_repr = models.CharField(max_length=150, help_text="Who, as it was at the time")
    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="audit_events",
    )
    verb = models.CharField(max_length=60, db_index=True)
    object_type = models.CharField(max_length=60)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    request_id = models.CharField(max_length=64, blank=True, db_index=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_repr} {self.verb} {self.object_repr}"

    def clean(self) -> None:
        if not self.verb:
            raise ValidationError("verb is required")


# --- API tokens --------------------------------------------------------------------------------


class ApiTokenQuerySet(models.QuerySet):
    def visible_to(self, user) -> ApiTokenQuerySet:
        """The one token-visibility rule, for the tokens page, the API and every revoke path:
        a user sees their own tokens and those of the CI robot of every tenant they own;
        platform admins see all; anonymous callers none. It is exactly what `revoke_token`
        lets the user revoke (own, robot of an owned tenant, anything for platform admins)."""
        if is_platform_admin(user):
            return self
        if not getattr(user, "is_authenticated", False):
            return self.none()
        owned_robots = Tenant.objects.filter(
            robot__isnull=False,
            memberships__user=user,
            memberships__role=Membership.Role.OWNER,
        ).values("robot_id")
        return self.filter(Q(user=user) | Q(user_id__in=owned_robots))

    def usable(self, now=None) -> ApiTokenQuerySet:
        now = now or timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )


class ApiToken(models.Model):
    """A bearer token: shown once, stored as a sha256 hash, with a visible prefix."""

    class Scope(models.TextChoices):
        READ = "read", "Read"
        REQUEST = "request", "Ask for capacity"
        SUBMIT = "submit", "Submit and cancel workloads"
        APPROVE = "approve", "Approve (platform admins)"
        # Platform automation: tenants, memberships, pools and policy. Only a platform admin's
        # token may carry it, minted by a platform admin; it covers every other scope too.
        ADMIN = "admin", "Administer the platform (platform admins)"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=80)
    prefix = models.CharField(max_length=16, db_index=True, help_text="Visible start of the token")
    token_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    def has_scope(self, scope: str) -> bool:
        return scope in (self.scopes or [])


# --- notifications -----------------------------------------------------------------------------


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
        """Where it sends, as pages and the API show it: a Slack-compatible URL is itself the
        credential to post, so it is cut after the host."""
        if self.kind == self.Kind.SLACK:
            scheme, _, rest = self.target.partition("://")
            return f"{scheme}://{rest.split('/', 1)[0]}/…"
        return self.target


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
