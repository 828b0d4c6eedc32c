"""Thin API views of the scheduler: resource classes and workloads."""

from __future__ import annotations

from django.conf import settings
from django.db.models import (
    BooleanField,
    F,
    IntegerField,
    JSONField,
    OuterRef,
    Subquery,
    Sum,
    Value,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from catalog.models import ResourceClass
from core.api.idempotency import IDEMPOTENCY_PARAMETER, idempotent
from core.api.viewsets import PortalGenericViewSet
from core.permissions import is_platform_admin
from scheduler.workloads import services as workloads
from scheduler.workloads.api import serializers as s
from scheduler.workloads.api import submit_serializers as submit
from scheduler.workloads.filtersets import WorkloadFilter
from scheduler.workloads.lifecycle import logs as pod_logs
from scheduler.workloads.lifecycle import suspending
from scheduler.workloads.models import Workload, WorkloadEvent
from scheduler.workloads.submit import needs
from scheduler.workloads.submit.spec import workload_spec
from tenants import hooks
from tenants.api.views import visible_tenant
from tenants.models import ApiToken, Membership, QuotaGrant
from tenants.permissions import WRITE_ROLES


class ResourceClassViewSet(viewsets.ReadOnlyModelViewSet):
    """The catalog every signed-in caller may see: classes with pool capacity, granted, free."""

    serializer_class = s.ResourceClassSerializer
    lookup_field = "slug"
    lookup_value_regex = r"[a-z0-9.-]+"
    filterset_fields = ["gpu_model", "kind"]
    ordering_fields = ["slug", "gpu_model", "price_per_hour"]

    def get_queryset(self):
        granted = (
            QuotaGrant.objects.holding()
            .filter(resource_class=OuterRef("pk"))
            .values("resource_class")
            .annotate(total=Sum("amount"))
            .values("total")
        )
        return (
            ResourceClass.objects.filter(active=True)
            .select_related("pool")
            .annotate(granted=Coalesce(Subquery(granted, output_field=IntegerField()), 0))
        )


# The two columns below are written in SQL: the ORM's Exists and ArraySubquery say the same but
# take longer to compile, on every call, than the whole of the rest of a status call's query.
# Only table names go into them; the values are parameters.
_ENV_VALUES_READABLE_SQL = (
    'EXISTS (SELECT 1 FROM "{memberships}" m WHERE m.tenant_id = "{workloads}"."tenant_id" '
    "AND m.user_id = %s AND m.role IN ({roles}))"
)
_EVENT_ROWS_SQL = (
    "SELECT COALESCE(jsonb_agg(jsonb_build_object('created_at', e.created_at, 'state', e.state, "
    "'reason', e.reason, 'message', e.message) ORDER BY e.created_at, e.id), '[]'::jsonb) "
    'FROM "{events}" e WHERE e.workload_id = "{workloads}"."id"'
)


def env_values_readable_expression(user):
    """`selectors.env_values_readable` as a column of the workload query: platform admins, and
    members of the workload's tenant with a write role (tests compare the two for every role)."""
    if is_platform_admin(user):
        return Value(True)
    if not getattr(user, "is_authenticated", False):
        return Value(False)
    roles = sorted(WRITE_ROLES)
    sql = _ENV_VALUES_READABLE_SQL.format(
        memberships=Membership._meta.db_table,
        workloads=Workload._meta.db_table,
        roles=", ".join(["%s"] * len(roles)),
    )
    return RawSQL(sql, [user.pk, *roles], output_field=BooleanField())  # noqa: S611


def event_rows_expression():
    """A workload's events, oldest first (WorkloadEvent's ordering), as JSON objects."""
    sql = _EVENT_ROWS_SQL.format(
        events=WorkloadEvent._meta.db_table, workloads=Workload._meta.db_table
    )
    return RawSQL(sql, [], output_field=JSONField())  # noqa: S611


class WorkloadViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    PortalGenericViewSet,
):
    # One query answers a call: the tenant's slug and the submitter's name as columns rather
    # than two more model rows, whether the caller reads env values, and (detail) the events
    # as JSON built by PostgreSQL; the serializers read these annotations.
    queryset = Workload.objects.annotate(
        tenant_slug=F("tenant__slug"), submitted_by_username=F("submitted_by__username")
    )
    serializer_class = s.WorkloadSerializer
    filterset_class = WorkloadFilter
    ordering_fields = ["created_at", "state", "name"]
    write_scope = ApiToken.Scope.SUBMIT

    def get_queryset(self):
        columns = {s.ENV_VALUES_READABLE: env_values_readable_expression(self.request.user)}
        if self.action == "retrieve":
            columns[s.EVENT_ROWS] = event_rows_expression()
        return super().get_queryset().annotate(**columns)

    def filter_queryset(self, queryset):
        # A detail call without a query string: the filters have nothing to do, and building
        # django-filter's form to find that out costs more than the call's query.
        if self.action == "retrieve" and not self.request.query_params:
            return queryset
        return super().filter_queryset(queryset)

    def get_serializer_class(self):
        return s.WorkloadDetailSerializer if self.action == "retrieve" else s.WorkloadSerializer

    @extend_schema(
        request=submit.WorkloadCreateSerializer,
        responses={201: s.WorkloadSerializer},
        parameters=[IDEMPOTENCY_PARAMETER],
        examples=[
            OpenApiExample(
                "A training job on one MIG slice",
                request_only=True,
                value={
                    "tenant": "team-a",
                    "name": "train-7",
                    "kind": "job",
                    "image": "pytorch/pytorch:2.4-cuda12.4",
                    "command": ["python", "train.py"],
                    "resources": {"a100-80gb-mig-3g.40gb": 1},
                    "priority": "gpu-low",
                },
            ),
            OpenApiExample(
                "A training job with cpu, memory, shared memory, a dataset and its Secrets",
                request_only=True,
                value={
                    "tenant": "team-a",
                    "name": "train-8",
                    "kind": "job",
                    "image": "registry.example.com/team-a/trainer:1.4",
                    "command": ["torchrun", "train.py"],
                    "resources": {"h100-80gb": 2},
                    "priority": "gpu-low",
                    "cpu": "16",
                    "memory": "128Gi",
                    "ephemeral_storage": "100Gi",
                    "shm": "32Gi",
                    "volumes": [
                        {"claim": "imagenet", "mount_path": "/data", "read_only": True},
                        {"claim": "checkpoints", "mount_path": "/checkpoints"},
                    ],
                    "env_from_secrets": ["wandb"],
                    "image_pull_secrets": ["registry-team-a"],
                },
            ),
            OpenApiExample(
                "An inference deployment that scales on GPU utilisation and latency",
                request_only=True,
                value={
                    "tenant": "team-a",
                    "name": "serve-llm",
                    "kind": "deployment",
                    "image": "vllm/vllm-openai:v0.6.3",
                    "args": ["--model", "/models/llama-3-8b"],
                    "resources": {"h100-80gb": 1},
                    "priority": "gpu-high",
                    "autoscaling": {
                        "min_replicas": 1,
                        "max_replicas": 4,
                        "target_gpu_util": 70,
                        "target_latency_ms": 250,
                        "target_requests_per_s": 4,
                    },
                },
            ),
        ],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        data = submit.WorkloadCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = dict(data.validated_data)
        need = v.pop("need", None)  # or resources: the serializer lets exactly one through
        tenant = visible_tenant(request.user, v.pop("tenant"))
        if need is not None:
            v["resources"] = needs.resources_for(need)  # the shape the portal chose
        workload = workloads.submit_workload(
            actor=request.user, tenant=tenant, spec=workload_spec(**v)
        )
        # Answered from the row the service wrote and the tenant it locked (no read back). The
        # service admits only callers who may submit to the tenant (`can_ask`), and exactly
        # those read its env values (`selectors.can_read_env_values`).
        workload.tenant_slug = workload.tenant.slug
        workload.submitted_by_username = request.user.get_username()
        setattr(workload, s.ENV_VALUES_READABLE, True)
        return Response(
            s.WorkloadSerializer(workload, context=self.get_serializer_context()).data,
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(request=None, responses=s.WorkloadSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        workload = workloads.cancel_workload(actor=request.user, workload=self.get_object())
        workload = self.get_queryset().get(pk=workload.pk)
        return Response(s.WorkloadSerializer(workload, context=self.get_serializer_context()).data)

    @extend_schema(
        request=None,
        responses=s.WorkloadSerializer,
        description="Resume a workload the portal suspended for holding idle GPUs: a job goes "
        "back to its team's queue, a deployment to its replicas. 409 `invalid_transition` "
        "unless it is suspended.",
    )
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        workload = suspending.resume_workload(actor=request.user, workload=self.get_object())
        workload = self.get_queryset().get(pk=workload.pk)
        return Response(s.WorkloadSerializer(workload, context=self.get_serializer_context()).data)

    @extend_schema(
        parameters=[OpenApiParameter("tail", int, description="last lines (default 500)")],
        responses={200: s.LogsSerializer},
        description="The newest pod's log where the cluster serves it; 409 `logs_unavailable` "
        "otherwise (simulated nodes have no containers, hence no logs).",
    )
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        try:
            tail = max(1, min(int(request.query_params.get("tail", 500)), 10_000))
        except ValueError:
            tail = 500
        pod, text = pod_logs.workload_logs(
            actor=request.user, workload=self.get_object(), tail_lines=tail
        )
        return Response({"pod": pod, "log": text})

    @extend_schema(
        responses={200: s.WorkloadCostSerializer},
        description="What the workload cost: its pods' held units priced as the team's "
        "statement prices them (the same number as its page and the statement's by-workload "
        "table), with the billing basis in force and what it was admitted with.",
    )
    @action(detail=True, methods=["get"])
    def cost(self, request, pk=None):
        workload = self.get_object()
        return Response(
            {
                "cost": str(hooks.workload_costs([workload.pk]).get(workload.pk)),
                "currency": settings.BILLING_CURRENCY,
                "basis": settings.BILLING_BASIS,
                "admitted_with": workload.units_held(),
            }
        )
