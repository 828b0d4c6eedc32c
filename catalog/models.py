"""Resource classes (a whole GPU, a MIG profile, a shared replica) and the pools that hold them."""

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from catalog.idle_policy import IdlePolicy

MAX_GRANT_DAYS = 3660  # the most a pool's policy may allow: ten years

resource_class_slug = RegexValidator(
    r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$",
    "Use lower-case letters, digits, '-' and '.', e.g. a100-80gb-mig-3g.40gb.",
)


class ResourceClass(models.Model):
    """What a quota is counted in: a whole GPU, a MIG profile or a shared replica of one model."""

    class Kind(models.TextChoices):
        WHOLE = "whole", "Whole GPU"
        MIG = "mig", "MIG instance"
        SHARED = "shared", "Shared replica (time-slicing / MPS)"

    slug = models.CharField(max_length=80, unique=True, validators=[resource_class_slug])
    gpu_model = models.CharField(max_length=64, help_text="Catalog key, e.g. A100-80GB")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    profile = models.CharField(max_length=32, blank=True, help_text="MIG profile, e.g. 3g.40gb")
    resource_name = models.CharField(max_length=63, help_text="Kubernetes extended resource")
    gpu_fraction = models.DecimalField(
        max_digits=6, decimal_places=4, help_text="GPU-equivalents of one unit"
    )
    memory_gb = models.PositiveIntegerField()
    price_per_hour = models.DecimalField(
        max_digits=10,
        decimal_places=4,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Per unit-hour, in the billing currency (BILLING_CURRENCY)",
    )
    active = models.BooleanField(default=True)

    class Meta:
        app_label = "scheduler"  # born there: its table and migrations stay (docs/architecture.md)
        ordering = ["gpu_model", "kind", "profile"]
        verbose_name_plural = "resource classes"

    def __str__(self) -> str:
        return self.slug

    @property
    def display_name(self) -> str:
        if self.kind == self.Kind.MIG:
            return f"{self.gpu_model} MIG {self.profile}"
        if self.kind == self.Kind.SHARED:
            return f"{self.gpu_model} shared replica"
        return f"{self.gpu_model} whole GPU"


class IdlePolicyFields(models.Model):
    """Idle GPUs given back (catalog/idle_policy.py), as a pool or a team sets it:
    below `idle_threshold_pct` % GPU use a workload is warned, then suspended; null turns the
    policy off (the default). A workload gets the strictest of its pools' and its team's."""

    idle_threshold_pct = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        default=None,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Below this % GPU use a workload is idle: warned, then suspended (empty: off)",
    )
    idle_warn_after_s = models.PositiveIntegerField(
        default=1800, help_text="Seconds idle before the workload's owners are warned"
    )
    idle_suspend_after_s = models.PositiveIntegerField(
        default=2700, help_text="Seconds idle before the workload is suspended (its GPUs freed)"
    )
    idle_protect_s = models.PositiveIntegerField(
        default=900, help_text="Seconds after a start or a resume during which nothing is done"
    )

    class Meta:
        abstract = True

    @property
    def idle_policy(self) -> IdlePolicy | None:
        """The idle policy, None while it is off."""
        if self.idle_threshold_pct is None:
            return None
        return IdlePolicy(
            self.idle_threshold_pct,
            self.idle_warn_after_s,
            self.idle_suspend_after_s,
            self.idle_protect_s,
        )


class Pool(IdlePolicyFields):
    """How many units of a resource class exist, and how far approvals may go beyond that."""

    class Source(models.TextChoices):
        MANUAL = "manual", "Set by the platform team"
        CLUSTER = "cluster", "Synced from the cluster's nodes"

    resource_class = models.OneToOneField(
        ResourceClass, on_delete=models.PROTECT, related_name="pool"
    )
    capacity = models.PositiveIntegerField(default=0)
    overcommit_ratio = models.DecimalField(
        max_digits=5,
        decimal_places=2,
        default=Decimal("1.00"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Approvals may grant up to capacity × ratio",
    )
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.MANUAL)
    # What pods outside the teams' namespaces hold of the nodes' units when the inventory last
    # synced (scheduler/cluster/outside_use.py): `capacity` is already without them.
    outside_use = models.PositiveIntegerField(
        default=0, help_text="Units pods outside the teams' namespaces hold (not in capacity)"
    )
    outside_namespaces = models.JSONField(
        default=dict, blank=True, help_text="Namespace -> units its pods hold, outside the teams"
    )
    # Kueue cohort policy: what one team may borrow of what others leave idle, and whether
    # teams lend their own idle units (taken back by preemption when the lender needs them).
    borrowing_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=None,
        help_text="Units of this class one team may borrow beyond its grant while other teams "
        "leave them idle (empty: no limit but what is idle; 0: no borrowing)",
    )
    lend_idle = models.BooleanField(
        default=True,
        help_text="Teams lend their idle granted units of this class to borrowers; the lender "
        "takes them back by preemption when it needs them",
    )
    reclaim_grace_s = models.PositiveIntegerField(
        default=600,
        help_text="Seconds a workload running on borrowed units may run before its lender "
        "takes them back (the work it would lose is spared until then; 0: at once)",
    )
    # Maximum run time of a job on this class (catalog/run_limits.py): Kueue stops it
    # after this long admitted; a team's own limit, when smaller, wins.
    max_run_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=None,
        help_text="Most seconds a job on this class may run before Kueue stops it (empty: no "
        "limit; a team's own limit, when smaller, wins)",
    )
    # A mistyped year ("9999") is refused at the form, not approved as decades of quota.
    max_grant_days = models.PositiveIntegerField(
        default=365,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_GRANT_DAYS)],
        help_text="The longest a grant of this class may be asked for: an ask or an extension "
        "ends at most this many days after it is made",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "scheduler"  # born there: its table and migrations stay
        ordering = ["resource_class__slug"]

    def __str__(self) -> str:
        return f"pool {self.resource_class.slug}: {self.capacity}"

    @property
    def offered(self) -> int:
        """Units the nodes offer, those used outside the portal included."""
        return self.capacity + self.outside_use

    @property
    def grantable(self) -> int:
        """Units approvals may hand out in total (capacity × overcommit, rounded down)."""
        return int(Decimal(self.capacity) * self.overcommit_ratio)

    def borrowable(self, granted: int) -> int:
        """Units a team granted `granted` may hold beyond that by borrowing: the limit, or with
        no limit what the pool has beyond the grant (more than exists never frees up)."""
        if self.borrowing_limit is not None:
            return self.borrowing_limit
        return max(0, self.capacity - granted)
