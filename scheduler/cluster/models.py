"""What the portal knows of the cluster: the cluster, its nodes and the GPU pods on them, and how
each tenant's namespace stands against what PostgreSQL says it should have."""

from django.db import models

from core.permissions import is_platform_admin

# The cluster the portal's own configuration reaches (KUBECONFIG, or the pod's ServiceAccount):
# the inventory, health and metering of a single-cluster install are recorded under this name.
DEFAULT_CLUSTER = "local"


class ClusterQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Clusters are the platform team's: others see none (a 404, never a 403)."""
        return self if is_platform_admin(user) else self.none()

    def active(self):
        return self.filter(archived_at__isnull=True)

    def workers(self):
        """Active workers in the platform's order: MultiKueue tries them in this order."""
        return self.active().filter(role=Cluster.Role.WORKER).order_by("preference", "name")


class Cluster(models.Model):
    """A Kubernetes cluster the portal governs. A single-cluster install has one, standalone,
    reached through the portal's own configuration. A fleet has one manager (the portal's own
    cluster: it holds the queues and dispatches through MultiKueue) and workers, each reached
    through a kubeconfig in a Secret on the manager (scheduler/cluster/credentials.py)."""

    class Role(models.TextChoices):
        STANDALONE = "standalone", "Standalone (runs its own work, no MultiKueue)"
        MANAGER = "manager", "Manager (queues work and dispatches it to workers)"
        WORKER = "worker", "Worker (runs what the manager dispatches)"

    name = models.CharField(max_length=63, unique=True)
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.STANDALONE)
    region = models.CharField(max_length=63, blank=True)
    # MultiKueue nominates workers in this order (lower first; ties by name).
    preference = models.PositiveSmallIntegerField(default=100)
    # "Any cluster of <group>": a grant may name a group of workers instead of one.
    group = models.CharField(max_length=40, blank=True)
    # Its GPU hours cost this many times the class's list price (a cloud cluster dearer than
    # the on-premises one): metering rates each cluster's use with its own factor.
    price_factor = models.DecimalField(max_digits=6, decimal_places=3, default=1)
    # Where the worker's kubeconfig is: a Secret on the manager, key `kubeconfig`. Only the
    # reference is stored; the portal reads the Secret and never shows its contents.
    credentials_secret_namespace = models.CharField(max_length=63, blank=True)
    credentials_secret_name = models.CharField(max_length=253, blank=True)
    api_server = models.CharField(max_length=200, blank=True)
    kubeconfig_path = models.CharField(
        max_length=500, blank=True, help_text="Empty: the KUBECONFIG setting or in-cluster config"
    )
    last_sync_at = models.DateTimeField(null=True, blank=True)
    last_sync_error = models.TextField(blank=True)
    server_version = models.CharField(max_length=40, blank=True)
    # The last health check (scheduler/cluster/probes.py): None while never checked.
    reachable = models.BooleanField(null=True, blank=True)
    kueue_version = models.CharField(max_length=40, blank=True)
    last_error = models.TextField(blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    # A cluster that is gone stays as a row (its usage and statements point at it): archived.
    archived_at = models.DateTimeField(null=True, blank=True)

    objects = ClusterQuerySet.as_manager()

    class Meta:
        constraints = [
            # A worker is reached through its Secret, the home cluster through the portal's own
            # configuration (one at a time: scheduler/cluster/fleet.py checks under a lock).
            models.CheckConstraint(
                condition=(
                    models.Q(role="worker") & ~models.Q(credentials_secret_name="")
                    | ~models.Q(role="worker") & models.Q(credentials_secret_name="")
                ),
                name="cluster_worker_has_credentials",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_home(self) -> bool:
        """Reached through the portal's own configuration, not through a Secret."""
        return self.role != self.Role.WORKER

    @property
    def credentials_secret(self) -> str:
        """`namespace/name` of its kubeconfig Secret ("" for the home cluster)."""
        if not self.credentials_secret_name:
            return ""
        return f"{self.credentials_secret_namespace}/{self.credentials_secret_name}"


SIMULATED_LABEL = ("type", "kwok")


class Node(models.Model):
    """A GPU node as NVIDIA's device plugin and GPU feature discovery describe it."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    gpu_model = models.CharField(max_length=64, blank=True, help_text="Catalog key")
    gpu_product = models.CharField(max_length=120, blank=True)
    gpu_count = models.PositiveIntegerField(default=0)
    gpu_memory_mib = models.PositiveIntegerField(default=0)
    mig_strategy = models.CharField(max_length=20, blank=True)
    mig_config = models.CharField(max_length=63, blank=True)
    mig_config_state = models.CharField(max_length=20, blank=True)
    sharing_strategy = models.CharField(max_length=20, blank=True)
    sharing_replicas = models.PositiveIntegerField(default=1)
    device_plugin_config = models.CharField(max_length=63, blank=True)
    allocatable = models.JSONField(default=dict, help_text="GPU resource name -> count")
    labels = models.JSONField(default=dict)
    # keys of its taints: a GPU node without the GPU taint takes any CPU pod (console warns)
    taints = models.JSONField(default=list)
    schedulable = models.BooleanField(default=True)
    ready = models.BooleanField(default=False)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="unique_node_per_cluster")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def simulated(self) -> bool:
        """A node KWOK simulates (the local cluster's): its pods have no containers, so no logs,
        and they run until stopped. KWOK's convention labels its nodes `type: kwok`."""
        return (self.labels or {}).get(SIMULATED_LABEL[0]) == SIMULATED_LABEL[1]


class PodAllocation(models.Model):
    """A pod bound to a node that holds GPU devices, as the last inventory sync saw it."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="allocations")
    uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63)
    pod_name = models.CharField(max_length=253)
    node_name = models.CharField(max_length=253, db_index=True)
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resources = models.JSONField(default=dict, help_text="GPU resource name -> units")
    phase = models.CharField(max_length=20)
    priority_class = models.CharField(max_length=63, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    seen_at = models.DateTimeField()

    class Meta:
        ordering = ["node_name", "namespace", "pod_name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "uid"], name="unique_pod_allocation")
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod_name} on {self.node_name}"


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
    # The team's Kueue queue as last read (scheduler.cluster.queues): nominal, used, borrowed
    # and lent per (flavor, resource), pending and admitted counts.
    queue_status = models.JSONField(default=dict, blank=True)
    # Since when the team has run more than its grant plus borrowing (ISO time; empty: not over):
    # the over-quota policy stops work after a grace period (scheduler.workloads.queue.overquota).
    over_quota_since = models.CharField(max_length=40, blank=True)
    # The current run of failed reconciles: how many, and when the first of them started (a
    # change enqueues a reconcile at once, so that is about when the namespace fell behind).
    consecutive_failures = models.PositiveIntegerField(default=0)
    failing_since = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.tenant}: {self.get_status_display()}"

    def record_run(self, *, started, finished, error: str | None = None) -> None:
        """One reconcile's outcome (`error` None: it succeeded): a failure extends the streak,
        a success ends it."""
        self.last_run_at = finished
        if error is not None:
            self.status = self.Status.FAILED
            self.last_error = error[:2000]
            if not self.consecutive_failures:
                self.failing_since = started
            self.consecutive_failures += 1
        else:
            self.status = self.Status.IN_SYNC
            self.last_success_at = finished
            self.last_error = ""
            self.consecutive_failures, self.failing_since = 0, None

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
