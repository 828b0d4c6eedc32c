from django.db import models


class TenantSyncState(models.Model):
    """Where a tenant's namespace stands against what PostgreSQL says it should have."""

    class Status(models.TextChoices):
        PENDING = "pending", "Not synced yet"
        SYNCING = "syncing", "Syncing"
        IN_SYNC = "in_sync", "In sync"
        FAILED = "failed", "Failed"

    tenant = models.OneToOneField(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="sync_state"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    last_error = models.TextField(blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    # object key "Kind/namespace/name" -> hash of what was last applied: tells a hand edit or a
    # hand deletion (drift) from a change of what is granted.
    applied_hashes = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"{self.tenant}: {self.get_status_display()}"

    @property
    def summary(self) -> str:
        if self.status == self.Status.FAILED:
            return f"failed: {self.last_error}"
        return self.get_status_display().lower()


class ReconcileRun(models.Model):
    """One reconcile of one tenant (or of the cluster-wide objects when tenant is empty)."""

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    tenant = models.ForeignKey(
        "tenants.Tenant",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="reconcile_runs",
    )
    trigger = models.CharField(max_length=40, help_text="tenant change, periodic, manual")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    changes = models.JSONField(default=list, blank=True)
    drift = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    api_calls = models.PositiveIntegerField(default=0)
    writes = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["tenant", "-started_at"])]

    def __str__(self) -> str:
        return f"reconcile {self.tenant or 'cluster'} {self.status}"

    @property
    def objects_changed(self) -> int:
        return len(self.changes)
