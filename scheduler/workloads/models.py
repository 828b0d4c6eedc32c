"""Workloads that tenants run on the cluster: Jobs (training, batch) and Deployments (inference)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from catalog import run_limits
from core.errors import InvalidTransition
from core.querysets import TenantScopedQuerySet
from scheduler.cluster.render.labels import WORKSPACE_LABEL

# Pods of a workload unless it says otherwise (a job always runs one). The one definition: the
# model, the service, the API, the form and the autoscaling check read it from here.
DEFAULT_REPLICAS = 1
WORKSPACE_KIND_LABEL = "Notebook (workspace)"
# Arguments about a workspace server's own authentication, kept off its pages (its secret is
# read from the environment, never from here).
WORKSPACE_AUTH_ARGS = ("--ServerApp.token=", "--ServerApp.password=", "--auth=")


class WorkloadQuerySet(TenantScopedQuerySet):
    def live(self) -> WorkloadQuerySet:
        """Workloads that are not over: pending, queued, running or preempted (and waiting)."""
        return self.filter(state__in=Workload.LIVE_STATES)

    def holding(self) -> WorkloadQuerySet:
        """Workloads that hold quota: running ones, and pending ones (on their way to the
        cluster, counted until Kueue says they wait). Queued and preempted work holds none."""
        return self.filter(state__in=Workload.HOLDING_STATES)


class Workload(models.Model):
    class Kind(models.TextChoices):
        JOB = "job", "Job (training, batch)"
        DEPLOYMENT = "deployment", "Deployment (inference)"

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        PREEMPTED = "preempted", "Preempted"
        CANCELLED = "cancelled", "Cancelled"
        # Given back for sitting idle (metering/idle_runs.py): its quota is free, its spec kept;
        # it waits for its team to resume it.
        SUSPENDED = "suspended", "Suspended"

    LIVE_STATES = (State.PENDING, State.QUEUED, State.RUNNING, State.PREEMPTED, State.SUSPENDED)
    HOLDING_STATES = (State.PENDING, State.RUNNING)
    FINAL_STATES = (State.SUCCEEDED, State.FAILED, State.CANCELLED)
    # Where each state may go next. Kueue queues what does not fit yet (`queued`); work it
    # evicts (a lender reclaiming, higher priority) is `preempted` and waits in the queue again:
    # a job is suspended and requeued, a deployment's pods are recreated and gated.
    TRANSITIONS: dict[str, frozenset[str]] = {
        State.PENDING: frozenset(
            {
                State.QUEUED,
                State.RUNNING,
                State.SUCCEEDED,
                State.FAILED,
                State.PREEMPTED,
                State.CANCELLED,
            }
        ),
        State.QUEUED: frozenset(
            {
                State.PENDING,
                State.RUNNING,
                State.SUCCEEDED,
                State.FAILED,
                State.PREEMPTED,
                State.CANCELLED,
            }
        ),
        State.RUNNING: frozenset(
            {
                State.PENDING,
                State.QUEUED,
                State.SUCCEEDED,
                State.FAILED,
                State.PREEMPTED,
                State.CANCELLED,
                State.SUSPENDED,
            }
        ),
        State.PREEMPTED: frozenset(
            {State.RUNNING, State.PENDING, State.QUEUED, State.FAILED, State.CANCELLED}
        ),
        # resumed (queued again), or ended while suspended (deleted, cancelled)
        State.SUSPENDED: frozenset(
            {State.QUEUED, State.PENDING, State.SUCCEEDED, State.FAILED, State.CANCELLED}
        ),
        State.SUCCEEDED: frozenset(),
        State.FAILED: frozenset(),
        State.CANCELLED: frozenset(),
    }

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="workloads")
    name = models.CharField(max_length=40)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    image = models.CharField(max_length=300)
    command = models.JSONField(default=list, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    resources = models.JSONField(help_text="resource class slug -> units per pod")
    gpu_model = models.CharField(max_length=64, help_text="Catalog key of the GPU model")
    priority_class = models.CharField(max_length=40)
    replicas = models.PositiveIntegerField(
        default=DEFAULT_REPLICAS, validators=[MinValueValidator(1)]
    )
    backoff_limit = models.PositiveIntegerField(default=0)
    # A gang's pods in one rack (or block): "rack-required", "rack-preferred"; "" anywhere.
    topology = models.CharField(max_length=40, blank=True, default="")
    # Elastic scaling of a deployment: `replicas` is then the minimum, which admission checks
    # against the grant; the HorizontalPodAutoscaler may scale up to `max_replicas`, each pod
    # admitted by Kueue on its own (a pod beyond the grant waits, gated, with Kueue's reason).
    max_replicas = models.PositiveIntegerField(
        null=True, blank=True, help_text="Autoscaling: the most replicas (empty: fixed replicas)"
    )
    target_gpu_util = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Autoscaling: average GPU utilisation (%) the pods should run at",
    )
    target_latency_ms = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Autoscaling: average request latency (ms) the pods should answer in",
    )
    target_requests_per_s = models.DecimalField(
        null=True,
        blank=True,
        max_digits=9,
        decimal_places=3,  # a Kubernetes quantity in thousandths ("500m")
        validators=[MinValueValidator(Decimal("0.001"))],
        help_text="Autoscaling: requests per second each replica should serve, on average",
    )
    # An inference service: [{name, port}] its container serves on (a ClusterIP Service in
    # front) and {readiness, liveness: {path, port}} HTTP probes
    # (scheduler/workloads/kinds/serving.py).
    ports = models.JSONField(default=list, blank=True)
    probes = models.JSONField(default=dict, blank=True)
    # What the cluster last showed of an autoscaled deployment (sync.py): pods Kueue admitted
    # (they hold quota; None until seen) and the replicas its autoscaler wants.
    held_replicas = models.PositiveIntegerField(null=True, blank=True)
    desired_replicas = models.PositiveIntegerField(null=True, blank=True)
    # What the main container asks for besides GPUs, as Kubernetes quantities (requests =
    # limits); "" leaves it to the namespace's LimitRange defaults.
    cpu = models.CharField(max_length=32, blank=True, help_text="e.g. 8 or 500m")
    memory = models.CharField(max_length=32, blank=True, help_text="e.g. 64Gi")
    ephemeral_storage = models.CharField(max_length=32, blank=True, help_text="e.g. 100Gi")
    shm = models.CharField(
        max_length=32, blank=True, help_text="Shared memory size (memory-backed), e.g. 16Gi"
    )
    # Existing PersistentVolumeClaims of the team's namespace: [{claim, mount_path, read_only}]
    volumes = models.JSONField(default=list, blank=True)
    # Secrets of the team's namespace: every key becomes an env variable (envFrom)
    env_from_secrets = models.JSONField(default=list, blank=True)
    image_pull_secrets = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    reason = models.CharField(max_length=120, blank=True)
    message = models.TextField(blank=True)
    namespace = models.CharField(max_length=63)
    k8s_name = models.CharField(max_length=253)
    # Made outside the portal (kubectl, Helm, a framework) and followed through Kueue's
    # Workload for it (lifecycle/following.py): the kind of its top-level object, whose name is
    # k8s_name. Empty for the portal's own.
    owner_kind = models.CharField(max_length=40, blank=True, default="")
    k8s_uid = models.CharField(max_length=64, blank=True)
    # The worker MultiKueue dispatched it to (its Kueue Workload's status.clusterName); empty:
    # it runs on the portal's own cluster, or has not been dispatched yet.
    cluster = models.CharField(max_length=63, blank=True, default="")
    # None for work made outside the portal (owner_kind): the cluster does not say by whom
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="workloads",
        null=True,
        blank=True,
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cluster_created_at = models.DateTimeField(null=True, blank=True)
    # Where Kueue has it in the team's queue while queued (1 = next), by priority then age.
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    # A job's maximum run time, fixed at submit: the smallest of its team's and its pools'
    # (catalog/run_limits.py); Kueue stops it after this long admitted. None: none.
    max_run_s = models.PositiveIntegerField(null=True, blank=True)
    # Idle GPUs given back (scheduler/workloads/lifecycle/idle.py decides, metering/idle_runs.py
    # reads the use): since when its GPU use has been below its pool's threshold, the last look that
    # confirmed it (a longer gap starts the clock again), when its owners were warned, and when
    # it was last resumed (the protection window counts from there too).
    idle_since = models.DateTimeField(null=True, blank=True)
    idle_seen_at = models.DateTimeField(null=True, blank=True)
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    resumed_at = models.DateTimeField(null=True, blank=True)

    objects = WorkloadQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "state"]),
            models.Index(fields=["state"]),
            # a team's latest workloads (its page, its list) read off the index, not a sort of
            # all it ever ran: 18 ms for the 10,000 of a big team (issue 55)
            models.Index(fields=["tenant", "-created_at", "-id"]),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=Q(state__in=["pending", "queued", "running", "preempted", "suspended"]),
                name="unique_live_workload_name",
            ),
            models.CheckConstraint(condition=Q(replicas__gte=1), name="workload_replicas_positive"),
            models.CheckConstraint(
                condition=Q(max_replicas__isnull=True)
                | (
                    Q(kind="deployment", max_replicas__gte=F("replicas"))
                    & (
                        Q(target_gpu_util__isnull=False)
                        | Q(target_latency_ms__isnull=False)
                        | Q(target_requests_per_s__isnull=False)
                    )
                ),
                name="workload_autoscaling_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} of tenant #{self.tenant_id}"

    @property
    def origin(self) -> str:
        """Where it came from: "portal", or its top-level object's kind and name."""
        return f"{self.owner_kind} {self.k8s_name}" if self.owner_kind else "portal"

    @property
    def is_final(self) -> bool:
        return self.state in self.FINAL_STATES

    @property
    def autoscaling(self) -> dict | None:
        """The elastic range and targets of an autoscaled deployment, else None."""
        if self.max_replicas is None:
            return None
        return {
            "min_replicas": self.replicas,
            "max_replicas": self.max_replicas,
            "target_gpu_util": self.target_gpu_util,
            "target_latency_ms": self.target_latency_ms,
            # a number in JSON (the API, the audit), as it was given
            "target_requests_per_s": None
            if self.target_requests_per_s is None
            else float(self.target_requests_per_s),
        }

    @property
    def is_workspace_run(self) -> bool:
        """The run of a workspace (a notebook or VS Code server), labelled by its service."""
        return bool((self.labels or {}).get(WORKSPACE_LABEL))

    @property
    def kind_label(self) -> str:
        """What a person reads as its kind: a workspace's run is a notebook, not a batch job."""
        return WORKSPACE_KIND_LABEL if self.is_workspace_run else self.get_kind_display()

    @property
    def shown_args(self) -> list[str]:
        """Its arguments as pages and the API show them: a workspace server's authentication
        arguments are not shown anywhere (issue 49, 6); its secret is never among them (issue
        51: it comes from the workspace's Secret, through the environment)."""
        args = list(self.args or [])
        if not self.is_workspace_run:
            return args
        return [a for a in args if not a.startswith(WORKSPACE_AUTH_ARGS)]

    @property
    def max_pods(self) -> int:
        """The most pods this workload may run: a job's pods (a gang of N when N > 1: all
        run at once), a deployment's replicas, its max replicas when autoscaled."""
        return self.max_replicas or self.replicas

    @property
    def pods_held(self) -> int:
        """The pods whose quota this workload holds: an autoscaled deployment's admitted pods
        as last seen (its minimum until seen), else all of its pods."""
        if self.max_replicas is None:
            return self.replicas
        return self.held_replicas if self.held_replicas is not None else self.replicas

    def units_held(self) -> dict[str, int]:
        """resource class slug -> units this workload's pods hold (an autoscaled deployment:
        the pods Kueue admitted, not its max replicas)."""
        pods = self.pods_held
        return {slug: int(n) * pods for slug, n in (self.resources or {}).items()}

    @property
    def max_run_words(self) -> str:
        """The limit as the submitter is told it ("stops after 4 h of running"), or ""."""
        if self.max_run_s is None:
            return ""
        return f"stops after {run_limits.duration_words(self.max_run_s)} of running"

    @property
    def run_ends_at(self):
        """While it runs under a limit: when Kueue will stop it, counted from the start the
        portal saw (None otherwise). After a preemption Kueue counts only the time admitted,
        so the real end may be later, never earlier."""
        if self.max_run_s is None or self.started_at is None or self.state != self.State.RUNNING:
            return None
        return self.started_at + timedelta(seconds=self.max_run_s)

    def can_move_to(self, state: str) -> bool:
        return state in self.TRANSITIONS[self.state]

    def move_to(
        self,
        state: str,
        *,
        reason: str = "",
        message: str = "",
        at=None,
        started_at=None,
        finished_at=None,
    ) -> None:
        """Change state at `at` (default now); `started_at` and `finished_at` are when the
        cluster says the work ran, kept between the submission and `at`. A workload seen
        only once it had finished still gets the start the cluster reports."""
        if not self.can_move_to(state):
            raise InvalidTransition(
                f"workload {self.name} is {self.state}; it cannot become {state}"
            )
        at = at or timezone.now()
        self.state = state
        self.reason = reason
        self.message = message
        if self.started_at is None and (
            state == self.State.RUNNING or (state in self.FINAL_STATES and started_at)
        ):
            self.started_at = self._within(started_at, self.created_at, at)
        if state in self.FINAL_STATES:
            self.finished_at = self._within(finished_at, self.started_at or self.created_at, at)

    @staticmethod
    def _within(value, earliest, latest):
        """`value` clamped to [earliest, latest] (`latest` when None): another clock's time
        never falls before the submission or after the portal saw it."""
        if value is None:
            return latest
        if earliest is not None and value < earliest:
            return earliest
        return min(value, latest)


class WorkloadEvent(models.Model):
    """What happened to a workload, as the portal saw it (state changes, cluster events)."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(default=timezone.now)
    state = models.CharField(max_length=10, choices=Workload.State.choices, blank=True)
    reason = models.CharField(max_length=120, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.workload_id}: {self.state} {self.reason}"


class WorkloadSyncState(models.Model):
    """Where the periodic workload sync stands (one row): a watch cursor (resourceVersion) per
    watched kind, the workloads whose last sync failed and are tried again, and when the last
    full resync ran. PostgreSQL holds it, so any worker carries on where the last one stopped."""

    key = models.CharField(max_length=40, unique=True, default="workloads")
    cursors = models.JSONField(default=dict, blank=True, help_text="kind -> resourceVersion")
    retry_ids = models.JSONField(default=list, blank=True)
    full_sync_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"workload sync state {self.key}"


def refuse_a_workspace_run(workload: Workload, doing: str, *, for_workspace: bool) -> None:
    """A workspace's run follows the workspace's rules (only its owner stops or restarts it,
    within the per-person cap): every door but the workspace's own services (`for_workspace`)
    is refused `doing` it and told where to go."""
    if for_workspace:
        return
    workspace = (workload.labels or {}).get(WORKSPACE_LABEL)
    if workspace:
        raise InvalidTransition(
            f"{workload.name} is the run of workspace #{workspace}: {doing} it on the "
            f"workspace's page or with `gpu-portal workspace`, where its owner's rules apply",
            code="workspace_run",
        )
