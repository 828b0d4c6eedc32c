"""GPU health: the policy the platform team edits, each node's state, the events the signals
opened and the pods they hit."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from scheduler.health import policy


class HealthRule(models.Model):
    """One line of the health policy: a signal, when it fires, and what the portal does."""

    class Signal(models.TextChoices):
        XID = "xid", "XID error"
        GPU_TEMP = "gpu_temp", "GPU temperature (°C)"
        MEMORY_TEMP = "memory_temp", "Memory temperature (°C)"
        ECC = "ecc_uncorrectable", "Uncorrectable ECC errors in the window"
        ROW_REMAP = "row_remap_failure", "HBM row-remap failure"
        POWER = "power_throttle", "Power throttling (share of the window)"
        NVLINK = "nvlink_errors", "NVLink errors in the window"
        MISSING = "gpu_missing", "GPUs missing from the node's allocatable"

    class Action(models.TextChoices):
        WARN = "warn", "Warn only"
        TAINT = "taint", "Taint the node (no new work)"
        DRAIN = "drain", "Taint and drain the node's GPU pods"

    signal = models.CharField(max_length=24, choices=Signal.choices)
    xid_code = models.PositiveIntegerField(
        null=True, blank=True, help_text="XID rules: the code; empty: every code no rule names"
    )
    threshold = models.DecimalField(max_digits=10, decimal_places=3, null=True, blank=True)
    clear_below = models.DecimalField(
        max_digits=10,
        decimal_places=3,
        null=True,
        blank=True,
        help_text="Clear only below this (hysteresis); empty: below the threshold",
    )
    action = models.CharField(max_length=5, choices=Action.choices)
    auto_recover = models.BooleanField(
        default=False, help_text="Untaint by itself once clear for clear_after_s (else: ack)"
    )
    clear_after_s = models.PositiveIntegerField(
        default=300, help_text="How long the signal must stay clear before the event closes"
    )
    waive_billing = models.BooleanField(
        default=False, help_text="Time on the GPU after the event is not billed to the team"
    )
    enabled = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["signal", "xid_code", "threshold", "id"]

    def __str__(self) -> str:
        if self.signal == self.Signal.XID:
            return f"XID {self.xid_code if self.xid_code is not None else 'other'}: {self.action}"
        return f"{self.signal} ≥ {self.threshold}: {self.action}"

    def as_rule(self) -> policy.Rule:
        return policy.Rule(
            id=self.pk,
            signal=self.signal,
            action=self.action,
            xid_code=self.xid_code,
            threshold=self.threshold,
            clear_below=self.clear_below,
            auto_recover=self.auto_recover,
            clear_after_s=self.clear_after_s,
            waive_billing=self.waive_billing,
        )


class NodeHealth(models.Model):
    """Where a GPU node stands, as the last health check saw it."""

    class State(models.TextChoices):
        HEALTHY = "healthy", "Healthy"
        WARNING = "warning", "Warning"
        SICK = "sick", "Sick (tainted)"
        UNKNOWN = "unknown", "Health unknown"

    cluster = models.ForeignKey("scheduler.Cluster", on_delete=models.CASCADE, related_name="+")
    node_name = models.CharField(max_length=253)
    state = models.CharField(max_length=8, choices=State.choices, default=State.UNKNOWN)
    message = models.CharField(max_length=500, blank=True)
    tainted = models.BooleanField(default=False, help_text="The portal's health taint is on it")
    checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node_name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "node_name"], name="unique_node_health")
        ]

    def __str__(self) -> str:
        return f"{self.node_name}: {self.state}"


class HealthEventQuerySet(models.QuerySet):
    def open(self):
        return self.filter(closed_at__isnull=True)

    def filter_open_or_latched(self):
        """Open events, and closed ones whose signal has not been seen clear since an ack."""
        return self.filter(models.Q(closed_at__isnull=True) | models.Q(latched=True))

    def sickening(self):
        """Open events whose action keeps the node tainted."""
        return self.open().filter(action__in=["taint", "drain"])


class HealthEvent(models.Model):
    """One rule firing on one GPU (or node), from when it fired until it closed."""

    class CloseReason(models.TextChoices):
        CLEARED = "cleared", "Signal clear"
        RECOVERED = "recovered", "Recovered by itself"
        ACKNOWLEDGED = "acknowledged", "Acknowledged by a platform admin"

    cluster = models.ForeignKey("scheduler.Cluster", on_delete=models.CASCADE, related_name="+")
    node_name = models.CharField(max_length=253)
    gpu = models.CharField(max_length=8, blank=True, help_text="Index on the node; empty: node")
    gpu_uuid = models.CharField(max_length=64, blank=True)
    rule = models.ForeignKey(HealthRule, null=True, on_delete=models.SET_NULL, related_name="+")
    signal = models.CharField(max_length=24, choices=HealthRule.Signal.choices)
    action = models.CharField(max_length=5, choices=HealthRule.Action.choices)
    value = models.DecimalField(max_digits=24, decimal_places=6, null=True, blank=True)
    description = models.CharField(max_length=200)
    waive_billing = models.BooleanField(default=False)
    opened_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    clear_since = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    close_reason = models.CharField(max_length=12, choices=CloseReason.choices, blank=True)
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Acknowledged while still firing: the same reading opens nothing until it is seen clear.
    latched = models.BooleanField(default=False)
    drained_at = models.DateTimeField(null=True, blank=True)
    drain_message = models.CharField(max_length=500, blank=True)

    objects = HealthEventQuerySet.as_manager()

    class Meta:
        ordering = ["-opened_at", "-id"]
        indexes = [models.Index(fields=["node_name", "closed_at"], name="health_event_node_open")]

    def __str__(self) -> str:
        return f"{policy.where(self.node_name, self.gpu)}: {self.description}"

    @property
    def where(self) -> str:
        return policy.where(self.node_name, self.gpu)


class HealthImpact(models.Model):
    """A pod that held GPUs on the node when a taint or drain event opened, and what became of
    it: the team page and the statement read these."""

    class Outcome(models.TextChoices):
        RUNNING = "running", "Left running (taint only)"
        EVICTED = "evicted", "Stopped (evicted)"
        BLOCKED = "blocked", "Not evicted yet: a PodDisruptionBudget holds it"
        GONE = "gone", "Gone before the drain"

    event = models.ForeignKey(HealthEvent, on_delete=models.CASCADE, related_name="impacts")
    pod_uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63)
    pod_name = models.CharField(max_length=253)
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    workload = models.ForeignKey(
        "scheduler.Workload", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    priority = models.IntegerField(default=0)
    outcome = models.CharField(max_length=8, choices=Outcome.choices, default=Outcome.RUNNING)
    evicted_at = models.DateTimeField(null=True, blank=True)
    eviction_order = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["event", "eviction_order", "id"]
        constraints = [
            models.UniqueConstraint(fields=["event", "pod_uid"], name="unique_health_impact")
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod_name}: {self.outcome}"

    @property
    def message(self) -> str:
        """What the team reads."""
        what = f"job {self.workload.name}" if self.workload else f"pod {self.pod_name}"
        verb = {
            self.Outcome.EVICTED: "was stopped",
            self.Outcome.BLOCKED: "is being stopped",
            self.Outcome.RUNNING: "runs on a node taken out of service",
            self.Outcome.GONE: "had ended",
        }[self.Outcome(self.outcome)]
        return f"Your {what} {verb} because {self.event.where} reported {self.event.description}."
