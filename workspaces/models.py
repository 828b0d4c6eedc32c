"""Workspaces: a person's interactive server (Jupyter or code-server) on a GPU shape of the
team's grant, with a home volume kept across stops. Each start is a run: a `Workload` (a job
through the team's Kueue queue), so admission, budgets, the watch, metering and Kueue's time
limit are the workloads' own; the workspace keeps what outlives a run (its volume, its link,
its activity)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.querysets import TenantScopedQuerySet
from scheduler.workloads.models import Workload


class Workspace(models.Model):
    class Kind(models.TextChoices):
        JUPYTER = "jupyter", "Jupyter"
        CODE_SERVER = "code-server", "VS Code (code-server)"

    class State(models.TextChoices):
        """What the page says, from the current run (`state`)."""

        STARTING = "starting", "Starting"
        RUNNING = "running", "Running"
        STOPPED = "stopped", "Stopped"

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.PROTECT, related_name="workspaces"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="workspaces"
    )
    name = models.CharField(max_length=30)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    image = models.CharField(max_length=300)
    resource_class = models.CharField(max_length=64, help_text="resource class slug (one unit)")
    home_size = models.CharField(max_length=16, help_text="the home volume, e.g. 10Gi")
    time_limit_s = models.PositiveIntegerField(help_text="each run stops after this long")
    # the run now (or the last one); a new one on each restart after it ended
    run = models.ForeignKey(
        Workload, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    runs = models.PositiveIntegerField(default=0)
    # Kernel or terminal activity as the server last said it (Jupyter's /api/status
    # last_activity), and when the portal last asked.
    last_activity = models.DateTimeField(null=True, blank=True)
    activity_seen_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Teammates its owner lets open it (owner-only by default; audited share and unshare).
    shared_with = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="workspaces_shared_with_me"
    )
    # The server's own secret (Jupyter's token, code-server's hashed password), Fernet-sealed
    # (workspaces/secrets.py): the portal's auth step hands it to the proxy; never shown.
    server_secret_sealed = models.TextField(blank=True, default="", editable=False)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="unique_workspace_name")
        ]

    def __str__(self) -> str:
        return f"workspace {self.name} of tenant #{self.tenant_id}"

    @property
    def state(self) -> str:
        run = self.run
        if run is None or run.is_final or run.state == Workload.State.SUSPENDED:
            return self.State.STOPPED
        return self.State.RUNNING if run.state == Workload.State.RUNNING else self.State.STARTING

    @property
    def holds_gpu(self) -> bool:
        """Counted against its owner's cap and the team's grant: a run not over or stopped."""
        return self.state != self.State.STOPPED


class WorkspacePolicy(models.Model):
    """A team's own workspace rules (platform admins set them in the admin); without a row the
    settings' defaults apply (WORKSPACE_MAX_PER_PERSON, WORKSPACE_IDLE_AFTER_S)."""

    tenant = models.OneToOneField(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="workspace_policy"
    )
    max_per_person = models.PositiveSmallIntegerField(
        help_text="how many running workspaces one person may hold in this team"
    )
    idle_after_s = models.PositiveIntegerField(
        null=True, blank=True, help_text="stop after this long with no activity (empty: default)"
    )

    def __str__(self) -> str:
        return f"workspace policy of tenant #{self.tenant_id}"
