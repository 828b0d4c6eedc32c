"""What the workloads API answers: resource classes, a workload with its events, scaling and the
reason it waits, and its logs."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalog.models import ResourceClass
from scheduler.workloads.kinds.serving import MAX_TARGET_REQUESTS_PER_S, MIN_TARGET_REQUESTS_PER_S
from scheduler.workloads.models import Workload, WorkloadEvent
from scheduler.workloads.selectors import env_shown, env_values_readable, waiting_for
from scheduler.workloads.submit.input import MAX_REPLICAS, MAX_TARGET_LATENCY_MS

SECRET_REF_SCHEMA = {
    "type": "object",
    "description": "read the value from a key of a Secret in the team's namespace",
    "properties": {
        "secret": {"type": "string", "description": "the Secret's name (a DNS subdomain)"},
        "key": {"type": "string", "description": "the key in the Secret's data"},
    },
    "required": ["secret", "key"],
    "additionalProperties": False,
}
ENV_VALUE_SCHEMA = {"oneOf": [{"type": "string"}, SECRET_REF_SCHEMA]}


class ResourceClassSerializer(serializers.ModelSerializer):
    capacity = serializers.SerializerMethodField()
    grantable = serializers.SerializerMethodField()
    granted = serializers.IntegerField(read_only=True, help_text="Units grants hold now or later")
    free = serializers.SerializerMethodField(help_text="Units approvals may still hand out")

    class Meta:
        model = ResourceClass
        fields = [
            "slug",
            "display_name",
            "gpu_model",
            "kind",
            "profile",
            "resource_name",
            "gpu_fraction",
            "memory_gb",
            "price_per_hour",
            "capacity",
            "grantable",
            "granted",
            "free",
        ]
        read_only_fields = fields

    @staticmethod
    def _pool(rc: ResourceClass):
        return getattr(rc, "pool", None)

    def get_capacity(self, rc: ResourceClass) -> int:
        pool = self._pool(rc)
        return pool.capacity if pool else 0

    def get_grantable(self, rc: ResourceClass) -> int:
        pool = self._pool(rc)
        return pool.grantable if pool else 0

    def get_free(self, rc: ResourceClass) -> int:
        return max(0, self.get_grantable(rc) - (getattr(rc, "granted", 0) or 0))


class WorkloadEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = WorkloadEvent
        fields = ["created_at", "state", "reason", "message"]
        read_only_fields = fields


class AutoscalingSerializer(serializers.Serializer):
    """Elastic scaling of an inference deployment: a HorizontalPodAutoscaler between min and
    max replicas on pod metrics. Admission checks min_replicas against the grant; quota is held
    for the pods Kueue admits as it scales, and a pod beyond the grant waits in the queue."""

    min_replicas = serializers.IntegerField(
        min_value=1,
        max_value=MAX_REPLICAS,
        required=False,
        help_text="pods at least (default: replicas)",
    )
    max_replicas = serializers.IntegerField(
        min_value=1, max_value=MAX_REPLICAS, help_text="pods at most"
    )
    target_gpu_util = serializers.IntegerField(
        min_value=1,
        max_value=100,
        required=False,
        allow_null=True,
        help_text="average GPU utilisation (%) to hold, from DCGM",
    )
    target_latency_ms = serializers.IntegerField(
        min_value=1,
        max_value=MAX_TARGET_LATENCY_MS,
        required=False,
        allow_null=True,
        help_text="average request latency (ms) to hold",
    )
    target_requests_per_s = serializers.FloatField(
        min_value=float(MIN_TARGET_REQUESTS_PER_S),
        max_value=float(MAX_TARGET_REQUESTS_PER_S),
        required=False,
        allow_null=True,
        help_text="requests per second each replica should serve, on average (at most 3 "
        "decimals, e.g. 5 or 0.5), from the pods' request counter",
    )

    TARGETS = ("target_gpu_util", "target_latency_ms", "target_requests_per_s")

    def validate(self, attrs):
        if all(attrs.get(name) is None for name in self.TARGETS):
            raise serializers.ValidationError(
                "give target_gpu_util, target_latency_ms and/or target_requests_per_s to scale on"
            )
        return attrs


class VolumeSerializer(serializers.Serializer):
    """An existing PersistentVolumeClaim of the team's namespace, mounted into the container
    (the portal does not create it: the pod waits until it exists and is bound)."""

    claim = serializers.CharField(help_text="the PersistentVolumeClaim's name")
    mount_path = serializers.CharField(
        help_text="absolute path in the container, e.g. /data (not under /dev, /proc, /sys, "
        "/etc, /usr, ...)"
    )
    # DRF's metaclass takes declared fields off the class, so this does not shadow Field.read_only
    read_only = serializers.BooleanField(required=False, default=False)  # type: ignore[assignment]


_DATETIME = serializers.DateTimeField(read_only=True)
_BOOLEAN = serializers.BooleanField(read_only=True)


def _text(value) -> str | None:
    return None if value is None else str(value)


def _integer(value) -> int | None:
    return None if value is None else int(value)


def _datetime(value) -> str | None:
    if isinstance(value, str):  # from JSON built by PostgreSQL (a workload's events)
        value = datetime.fromisoformat(value)
    return None if value is None else _DATETIME.to_representation(value)


def _texts(values) -> list | None:
    return None if values is None else [_text(v) for v in values]


class WorkloadSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    submitted_by = serializers.CharField(source="submitted_by.username", read_only=True)
    priority = serializers.CharField(source="priority_class", read_only=True)
    resources = serializers.DictField(child=serializers.IntegerField(), read_only=True)
    is_final = serializers.BooleanField(read_only=True)
    autoscaling = AutoscalingSerializer(
        read_only=True, allow_null=True, help_text="null: a fixed number of replicas"
    )
    env = serializers.SerializerMethodField(
        help_text="NAME -> plain value or Secret reference; null: hidden (viewers see names only)"
    )
    volumes = VolumeSerializer(many=True, read_only=True)
    env_from_secrets = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="Secrets whose keys are env"
    )
    image_pull_secrets = serializers.ListField(child=serializers.CharField(), read_only=True)
    pods = serializers.IntegerField(
        source="max_pods",
        read_only=True,
        help_text="the most pods it runs at once: a job's gang (all admitted together), a "
        "deployment's replicas (its max replicas when autoscaled)",
    )
    ports = serializers.JSONField(read_only=True, help_text="[{name, port}] it serves on")
    probes = serializers.JSONField(
        read_only=True, help_text="{readiness, liveness: {path, port}} HTTP probes"
    )
    held_replicas = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="autoscaled: pods Kueue admitted as last seen (they hold quota)",
    )
    desired_replicas = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="autoscaled: replicas its autoscaler wants"
    )
    max_run = serializers.CharField(
        source="max_run_words",
        read_only=True,
        help_text='a job\'s maximum run time in words ("stops after 4 h of running"); "": none',
    )
    args = serializers.ListField(
        source="shown_args",
        child=serializers.CharField(),
        read_only=True,
        help_text="the arguments (a workspace's server's own authentication left out)",
    )
    origin = serializers.CharField(
        read_only=True,
        help_text='where it came from: "portal", or the kind and name of the object a team made '
        'with kubectl, Helm or a framework ("StatefulSet web"), which the portal follows',
    )
    run_ends_at = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="while it runs under a maximum run time: when Kueue stops it (from the start "
        "the portal saw; after a preemption it may be later); null otherwise",
    )

    class Meta:
        model = Workload
        fields = [
            "id",
            "tenant",
            "name",
            "kind",
            "origin",
            "image",
            "command",
            "args",
            "env",
            "labels",
            "resources",
            "gpu_model",
            "cpu",
            "memory",
            "ephemeral_storage",
            "shm",
            "volumes",
            "env_from_secrets",
            "image_pull_secrets",
            "priority",
            "replicas",
            "pods",
            "autoscaling",
            "ports",
            "probes",
            "held_replicas",
            "desired_replicas",
            "backoff_limit",
            "topology",
            "max_run_s",
            "max_run",
            "run_ends_at",
            "state",
            "is_final",
            "queue_position",
            "reason",
            "message",
            "namespace",
            "k8s_name",
            "k8s_uid",
            "cluster",
            "submitted_by",
            "created_at",
            "cluster_created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Workload) -> dict[str, Any]:
        """Meta.fields, each formatted as its DRF field does (tests/portal/api/
        test_workload_api_query_counts.py compares the two on every kind of workload), without
        DRF building and walking ~35 field objects per call: the status call's largest cost.
        The tenant's slug and the submitter's name come from the query's annotations
        (`tenant_slug`, `submitted_by_username`, views.py) where it made them."""
        w = instance
        autoscaling = w.autoscaling
        return {
            "id": w.pk,
            "tenant": _text(_annotated(w, "tenant_slug", lambda: w.tenant.slug)),
            "name": _text(w.name),
            "kind": _text(w.kind),
            "origin": _text(w.origin),
            "image": _text(w.image),
            "command": w.command,
            "args": w.shown_args,
            "env": self.get_env(w),
            "labels": w.labels,
            "resources": None
            if w.resources is None
            else {str(k): _integer(v) for k, v in w.resources.items()},
            "gpu_model": _text(w.gpu_model),
            "cpu": _text(w.cpu),
            "memory": _text(w.memory),
            "ephemeral_storage": _text(w.ephemeral_storage),
            "shm": _text(w.shm),
            # Rare and nested: DRF's own serializers, only when there is something to show.
            "volumes": VolumeSerializer(many=True).to_representation(w.volumes)
            if w.volumes
            else w.volumes,
            "env_from_secrets": _texts(w.env_from_secrets),
            "image_pull_secrets": _texts(w.image_pull_secrets),
            "priority": _text(w.priority_class),
            "replicas": _integer(w.replicas),
            "pods": _integer(w.max_pods),
            "autoscaling": None
            if autoscaling is None
            else AutoscalingSerializer().to_representation(autoscaling),
            "ports": w.ports,
            "probes": w.probes,
            "held_replicas": _integer(w.held_replicas),
            "desired_replicas": _integer(w.desired_replicas),
            "backoff_limit": _integer(w.backoff_limit),
            "topology": _text(w.topology),
            "max_run_s": _integer(w.max_run_s),
            "max_run": _text(w.max_run_words),
            "run_ends_at": _datetime(w.run_ends_at),
            "state": _text(w.state),
            "is_final": _BOOLEAN.to_representation(w.is_final),
            "queue_position": _integer(w.queue_position),
            "reason": _text(w.reason),
            "message": _text(w.message),
            "namespace": _text(w.namespace),
            "k8s_name": _text(w.k8s_name),
            "k8s_uid": _text(w.k8s_uid),
            "cluster": _text(w.cluster),
            "submitted_by": _text(
                _annotated(
                    w,
                    "submitted_by_username",
                    lambda: w.submitted_by.username if w.submitted_by else None,
                )
            ),
            "created_at": _datetime(w.created_at),
            "cluster_created_at": _datetime(w.cluster_created_at),
            "started_at": _datetime(w.started_at),
            "finished_at": _datetime(w.finished_at),
        }

    @extend_schema_field(
        {"type": "object", "additionalProperties": {**ENV_VALUE_SCHEMA, "nullable": True}}
    )
    def get_env(self, workload: Workload) -> dict:
        return env_shown(workload.env or {}, values=self._env_values_visible(workload))

    def _env_values_visible(self, workload: Workload) -> bool:
        """Asked once per request, for every row of a list; without a request (no reader
        known), values stay hidden. The query's `env_values_readable` annotation answers it
        where the view made one (views.py)."""
        request = self.context.get("request")
        if request is None:
            return False
        annotated = getattr(workload, ENV_VALUES_READABLE, None)
        if annotated is not None:
            return annotated
        # The context is the root serializer's dict, shared by every row of a list.
        context = cast(dict, self.context)
        if "_env_values_readable" not in context:
            context["_env_values_readable"] = env_values_readable(request.user)
        return context["_env_values_readable"](workload.tenant_id)


ENV_VALUES_READABLE = "env_values_readable"  # the annotation the views may add (a bool)
EVENT_ROWS = "event_rows"  # the annotation of a workload's events as JSON objects


def _annotated(workload: Workload, name: str, otherwise):
    value = getattr(workload, name, None)
    return otherwise() if value is None else value


class WaitingSerializer(serializers.Serializer):
    """Why a waiting workload waits, in words (scheduler/workloads/queue/waiting.py)."""

    code = serializers.CharField(
        help_text="suspended, over_budget, quota_full, borrowing_capped, nothing_idle, "
        "no_shape, quota, queue_inactive or in_queue; from Kueue's own reasons also "
        "exceeds_max, no_flavor, pods_ready, making_room or misconfigured"
    )
    reason = serializers.CharField(help_text="the reason in words, in the quota unit in force")
    position = serializers.IntegerField(
        allow_null=True, help_text="place in the team's queue (1 = next); null when not queued"
    )
    hints = serializers.ListField(
        child=serializers.CharField(), help_text="what would get it in sooner"
    )
    details = serializers.CharField(help_text="Kueue's (or the cluster's) own words")


class WorkloadDetailSerializer(WorkloadSerializer):
    events = WorkloadEventSerializer(many=True, read_only=True)
    waiting = serializers.SerializerMethodField(
        help_text="why it waits and what would get it in sooner; null when it is not waiting"
    )

    class Meta(WorkloadSerializer.Meta):
        fields = [*WorkloadSerializer.Meta.fields, "events", "waiting"]
        read_only_fields = fields

    @extend_schema_field(WaitingSerializer(allow_null=True))
    def get_waiting(self, workload: Workload) -> dict | None:
        """Queued, preempted, or pending where the cluster cannot place it; no query otherwise
        (the status call of running work stays one query)."""
        explained = waiting_for(workload)
        return None if explained is None else explained.as_dict()

    def to_representation(self, instance: Workload) -> dict[str, Any]:
        """The workload's fields and its events, oldest first: from the query's `event_rows`
        (JSON objects that PostgreSQL built in the same query) where the view asked for them,
        else from `events`."""
        data = super().to_representation(instance)
        rows = getattr(instance, EVENT_ROWS, None)
        if rows is None:
            rows = [
                {"created_at": e.created_at, "state": e.state, "reason": e.reason,
                 "message": e.message}
                for e in instance.events.all()
            ]  # fmt: skip
        data["events"] = [
            {
                "created_at": _datetime(row["created_at"]),
                "state": _text(row["state"]),
                "reason": _text(row["reason"]),
                "message": _text(row["message"]),
            }
            for row in rows
        ]
        data["waiting"] = self.get_waiting(instance)
        return data


class WorkloadCostSerializer(serializers.Serializer):
    cost = serializers.DecimalField(max_digits=14, decimal_places=2)
    currency = serializers.CharField()
    basis = serializers.ChoiceField(choices=["allocation", "quota", "max"])
    admitted_with = serializers.DictField(
        child=serializers.IntegerField(), help_text="resource class slug -> units, all pods"
    )


class LogsSerializer(serializers.Serializer):
    pod = serializers.CharField()
    log = serializers.CharField()
