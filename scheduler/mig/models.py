import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.errors import InvalidTransition


class Plan(models.Model):
    """A proposed MIG layout and sharing config for some nodes, and how applying it went."""

    class Status(models.TextChoices):
        PROPOSED = "proposed", "Proposed"
        APPLYING = "applying", "Applying"
        APPLIED = "applied", "Applied"
        FAILED = "failed", "Failed"
        ABANDONED = "abandoned", "Abandoned"

    # action -> (states it may start from, state it leads to)
    TRANSITIONS = {
        "start": (
            {Status.PROPOSED, Status.FAILED, Status.APPLIED, Status.ABANDONED},
            Status.APPLYING,
        ),
        # a rollout whose worker died (see is_stuck) is taken up again where it stopped
        "resume": ({Status.APPLYING}, Status.APPLYING),
        "finish": ({Status.APPLYING}, Status.APPLIED),
        "fail": ({Status.APPLYING}, Status.FAILED),
        # a platform admin stops a rollout: the step in progress ends, no further node starts
        "abandon": ({Status.APPLYING}, Status.ABANDONED),
    }

    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PROPOSED)
    method = models.CharField(max_length=10, default="exact")
    policy = models.JSONField(default=dict)
    # demand, served, unserved, supply before/after per class; solve time; counts
    summary = models.JSONField(default=dict)
    # one dict per node: current and proposed shapes, labels, changed GPUs, disturbed pods, and
    # the rollout step's state and message
    nodes = models.JSONField(default=list)
    mig_configs = models.JSONField(default=dict, help_text="Generated mig-parted configs")
    device_plugin_configs = models.JSONField(
        default=dict, help_text="Generated device-plugin configs (nodes that share some GPUs)"
    )
    failed_node = models.CharField(max_length=253, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Each start or resume gets a new id: the task chain carries it, and a step whose id is no
    # longer the plan's (resumed elsewhere, abandoned) does nothing more.
    rollout_id = models.CharField(max_length=32, blank=True)
    # Written by the worker at each step and while it waits on a node; a rollout whose worker
    # holds no lease (rollout.lease) and whose heartbeat stopped for a hand-over has lost it.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Who asked for the rollout and which nodes (null: every changed node): a rollout whose
    # worker died is resumed for them by the periodic check.
    applied_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    rollout_nodes = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"plan #{self.pk} ({self.status})"

    @staticmethod
    def step_limits_s() -> tuple[int, int]:
        """Soft and hard time limits of one rollout step (one node: drain, relabel, wait)."""
        soft = int(settings.MIG_NODE_TIMEOUT_S + settings.MIG_DRAIN_TIMEOUT_S) + 60
        return soft, soft + 60

    @staticmethod
    def handover_s() -> float:
        """How long a rollout that no live worker holds may stay silent before it counts as
        stuck: the hand-over from one step's task to the next, queued but not picked up yet."""
        return settings.MIG_ROLLOUT_HANDOVER_S

    def is_stuck(self, now=None, *, worker_alive: bool = False) -> bool:
        """Applying, no live worker on it (`worker_alive`, from the rollout's lease:
        `rollout.is_stuck` asks PostgreSQL), and silent for longer than a hand-over. A worker
        that is alive is never overtaken, however long its step: its time limit ends it."""
        now = now or timezone.now()
        last = self.heartbeat_at or self.started_at
        return (
            self.status == self.Status.APPLYING
            and not worker_alive
            and last is not None
            and (now - last).total_seconds() > self.handover_s()
        )

    def transition(self, action: str) -> None:
        allowed, target = self.TRANSITIONS[action]
        if self.status not in allowed:
            raise InvalidTransition(f"cannot {action} a plan that is {self.status}")
        self.status = target
        now = timezone.now()
        if action in ("start", "resume"):
            self.started_at, self.finished_at, self.failed_node, self.error = now, None, "", ""
            self.heartbeat_at, self.rollout_id = now, uuid.uuid4().hex
        else:
            self.finished_at = now

    @property
    def changed_nodes(self) -> list[dict]:
        return [n for n in self.nodes if n["changed_gpus"]]


class MigConfig(models.Model):
    """A mig-parted config the planner generated and the portal published (content-addressed
    name), so the capacity map and later plans can read layouts that are not in the file."""

    name = models.CharField(max_length=63, unique=True)
    entries = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class DevicePluginConfig(models.Model):
    """A device-plugin config the planner generated and the portal published (content-addressed
    name): it shares some of a node's GPUs, listed by index. Kept so every later publication
    still carries it, and so plans read which GPUs such a node shares."""

    name = models.CharField(max_length=63, unique=True)
    config = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class ElasticLayout(models.Model):
    """Elastic layouts for the GPUs of one model (the pool a layout is planned over): whether
    they follow the queue, after how long a wait, and how many GPUs an hour they may re-shape.
    A model with no row follows the settings' defaults (ELASTIC_LAYOUTS_*)."""

    gpu_model = models.CharField(max_length=64, unique=True, help_text="Catalog key")
    paused = models.BooleanField(default=False)
    min_wait_s = models.PositiveIntegerField(
        help_text="An ask must have waited this long for a shape before a GPU is re-shaped"
    )
    max_gpus_per_hour = models.PositiveSmallIntegerField(
        help_text="Disruption budget: GPUs re-shaped in any hour, at most"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        state = "paused" if self.paused else f"≤ {self.max_gpus_per_hour} GPUs/h"
        return f"elastic layouts of {self.gpu_model}: {state}"
