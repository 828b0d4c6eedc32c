"""Tenants and their members: the team (its status, ceiling, budget, CI robot and namespace) and
each person's role in it (given in the portal or by the identity provider's groups)."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from catalog.models import IdlePolicyFields
from core.errors import InvalidTransition
from core.names import namespace_name
from core.querysets import TenantScopedQuerySet
from tenants.group_mapping import mapping_in_force  # pure: no models, so no cycle

DNS_LABEL_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
dns_label = RegexValidator(
    DNS_LABEL_PATTERN,
    "Use 1–40 lower-case letters, digits and '-', starting and ending with a letter or digit.",
)


class TenantQuerySet(TenantScopedQuerySet):
    tenant_path = ""  # a tenant is its own tenant


class Tenant(IdlePolicyFields):
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
        help_text="Per month, in the billing currency (BILLING_CURRENCY); empty: none",
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
    fair_share_weight = models.DecimalField(
        max_digits=6,
        decimal_places=2,
        default=Decimal("1"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Kueue fair sharing: the team's weight when idle capacity is shared among "
        "teams that want more than their grant (2: twice the share of a team at 1; 0: last)",
    )
    # Maximum run time of the team's jobs (catalog/run_limits.py); a pool's, when
    # smaller, wins.
    max_run_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=None,
        help_text="Most seconds any job of the team may run before Kueue stops it (empty: the "
        "pools' limits only; a pool's limit, when smaller, wins)",
    )
    # Optional level above teams: its Kueue cohort, its admins' approvals, its quota.
    department = models.ForeignKey(
        "tenants.Department",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="teams",
        help_text="Its teams share idle quota first and its admins approve their asks",
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
        return self.source == self.Source.PROVIDER and mapping_in_force() is not None
