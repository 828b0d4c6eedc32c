"""What a submit takes (`POST /api/v1/workloads/`): input-only serializers, their fields built
once per process (`shared_fields`: a submit is the API's hot path)."""

from __future__ import annotations

from django.utils.functional import cached_property
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.utils.serializer_helpers import BindingDict

from scheduler.workloads.api.serializers import (
    ENV_VALUE_SCHEMA,
    AutoscalingSerializer,
    VolumeSerializer,
)
from scheduler.workloads.models import DEFAULT_REPLICAS, Workload
from scheduler.workloads.submit.input import MAX_BACKOFF_LIMIT, MAX_REPLICAS
from tenants.models.priority_classes import PRIORITY_CLASSES
from tenants.models.tenants import DNS_LABEL_PATTERN


@extend_schema_field(ENV_VALUE_SCHEMA)
class EnvValueField(serializers.Field):
    """A plain value, or {"secret": NAME, "key": KEY}. Admission (`input.check_env`) checks
    both, for the API and the browser form alike, and refuses plain values that look secret."""

    def to_internal_value(self, data):
        return data

    def to_representation(self, value):
        return value


QUANTITY_HELP = {
    "cpu": 'CPU cores as a Kubernetes quantity, requests = limits, e.g. "8" or "500m"; empty: '
    "the namespace's default",
    "memory": 'memory, requests = limits, e.g. "64Gi"; empty: the namespace\'s default',
    "ephemeral_storage": 'scratch disk of the container, requests = limits, e.g. "100Gi"',
    "shm": 'size of /dev/shm (memory-backed, counts against memory), e.g. "16Gi"; empty: the '
    "container runtime's small default",
}


def _quantity_field(name: str) -> serializers.CharField:
    # A string (a JSON number is taken as one); admission (`input.check_quantity`) reads it.
    return serializers.CharField(
        max_length=32, required=False, allow_blank=True, default="", help_text=QUANTITY_HELP[name]
    )


# Stateless DRF fields whose formatting the fast representation below reuses as it is.
_SHARED_FIELDS: dict[type, BindingDict] = {}


def shared_fields(cls: type[serializers.Serializer]) -> BindingDict:
    """The fields of an input-only serializer, built and bound once per process (to a template
    instance of their own) and shared by every call and thread. DRF builds each serializer's
    fields anew (a deep copy of every declared field, nested ones too) so that a view may change
    them per call; nothing here does, and validating keeps nothing on a field (it reads the
    field's configuration, its parent only for `root.partial`, always False here)."""
    fields = _SHARED_FIELDS.get(cls)
    if fields is None:
        template = cls()
        fields = BindingDict(template)
        for name, field in template.get_fields().items():
            fields[name] = field
        fields = _SHARED_FIELDS.setdefault(cls, fields)  # a race builds twice, keeps one
    return fields


class NeedSerializer(serializers.Serializer):
    """Ask by need (`scheduler.workloads.submit.needs`): the portal chooses the shape."""

    gpu_model = serializers.CharField(max_length=64, help_text="catalog key, e.g. A100-80GB")
    gpu_memory_gb = serializers.IntegerField(min_value=1, max_value=10_000, required=False)
    compute_slices = serializers.IntegerField(min_value=1, max_value=1_000, required=False)
    units = serializers.IntegerField(min_value=1, max_value=64, required=False, default=1)


class WorkloadCreateSerializer(serializers.Serializer):
    """A submit's fields, validated by DRF before the spec's parser checks them
    (`submit.spec.parse_spec`); the bounds the parser applies are stated here too, so the
    schema says them. Only for input (never partial, never an instance): its fields are built
    once (`fields`)."""

    tenant = serializers.CharField(help_text="tenant slug")
    name = serializers.RegexField(
        DNS_LABEL_PATTERN,
        max_length=40,
        help_text="DNS label (1–40 lower-case letters, digits and '-'), unique among live ones",
    )
    kind = serializers.ChoiceField(choices=Workload.Kind.choices)
    image = serializers.CharField(max_length=300)
    command = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    args = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    env = serializers.DictField(
        child=EnvValueField(),
        required=False,
        default=dict,
        help_text='NAME -> "value", or {"secret": NAME, "key": KEY} for a value from a Secret '
        "in the team's namespace; plain values that look secret are refused",
    )
    labels = serializers.DictField(child=serializers.CharField(), required=False, default=dict)
    resources = serializers.DictField(
        child=serializers.IntegerField(min_value=1),
        required=False,
        help_text="resource class slug -> units/pod (or `need`)",
    )
    need = NeedSerializer(
        required=False,
        help_text="instead of `resources`: at least this much of a model, the portal chooses "
        "the shape (free now, else the cheapest)",
    )
    priority = serializers.ChoiceField(choices=PRIORITY_CLASSES)
    replicas = serializers.IntegerField(
        min_value=1,
        max_value=MAX_REPLICAS,
        required=False,
        default=DEFAULT_REPLICAS,
        help_text="deployments only",
    )
    pods = serializers.IntegerField(
        min_value=1,
        max_value=MAX_REPLICAS,
        required=False,
        default=1,
        help_text="jobs only: worker pods of this shape (`resources` is per pod), admitted and "
        "started together as one gang, with the rendezvous env (MASTER_ADDR, MASTER_PORT, "
        "WORLD_SIZE, RANK, NPROC_PER_NODE and torchrun's PET_*); quota is checked for all of them",
    )
    autoscaling = AutoscalingSerializer(
        required=False, allow_null=True, help_text="deployments only; omit for fixed replicas"
    )
    backoff_limit = serializers.IntegerField(
        min_value=0, max_value=MAX_BACKOFF_LIMIT, required=False, default=0
    )
    topology = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=40,
        help_text="jobs of 2+ pods: `rack-required` (every pod in one rack, else it waits), "
        "`rack-preferred` (as close as the room allows), `block-…`, or `none`; the levels are "
        "the cluster's (setting GPU_TOPOLOGY_LEVELS), another is a 400",
    )
    cpu = _quantity_field("cpu")
    memory = _quantity_field("memory")
    ephemeral_storage = _quantity_field("ephemeral_storage")
    shm = _quantity_field("shm")
    volumes = VolumeSerializer(
        many=True, required=False, default=list, help_text="PersistentVolumeClaims to mount"
    )
    env_from_secrets = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        default=list,
        help_text="Secrets of the team's namespace whose every key becomes an env variable",
    )
    image_pull_secrets = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        default=list,
        help_text="Secrets of the team's namespace with registry credentials "
        "(kubernetes.io/dockerconfigjson)",
    )

    ports = serializers.JSONField(
        required=False,
        default=list,  # type: ignore[arg-type]  # the stubs take only a mapping; DRF any value
        help_text='deployments only: [{"name": "http", "port": 8080}] the container serves on; '
        "the portal puts a ClusterIP Service in front",
    )
    probes = serializers.JSONField(
        required=False,
        default=dict,
        help_text='deployments only: {"readiness": {"path": "/ready", "port": "http"}, '
        '"liveness": {"path": "/healthz", "port": 8080}} (port: a number or a port name)',
    )

    @cached_property
    def fields(self) -> BindingDict:
        return shared_fields(type(self))

    ONE_ASK = (
        "give resources (class -> units per pod) or need (the portal chooses the shape): "
        "exactly one of them"
    )

    def to_internal_value(self, data):
        """`resources` or `need`, exactly one, said beside the other fields' errors (a field
        cannot be required only when another is absent)."""
        # a null counts as not given: `"need": null` alone asks for nothing (found by the
        # schema fuzz: it reached the service with neither)
        given = [
            k for k in ("resources", "need") if hasattr(data, "get") and data.get(k) is not None
        ]
        wrong = len(given) != 1 and hasattr(data, "get")
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if wrong and isinstance(exc.detail, dict):
                exc.detail.setdefault(
                    "resources", [serializers.ErrorDetail(self.ONE_ASK, code="required")]
                )
            raise
        # exactly one in what was parsed (this also covers `wrong`): what a key held may
        # parse to nothing
        if sum(value.get(k) is not None for k in ("resources", "need")) != 1:
            raise serializers.ValidationError({"resources": [self.ONE_ASK]}, code="required")
        return value
