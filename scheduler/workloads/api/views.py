"""Thin API views of the scheduler: resource classes and workloads."""

from __future__ import annotations

from django.db.models import IntegerField, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api.idempotency import IDEMPOTENCY_PARAMETER, idempotent
from core.api.viewsets import PortalGenericViewSet
from scheduler.catalog.models import ResourceClass
from scheduler.cluster import kube
from scheduler.workloads import services as workloads
from scheduler.workloads import sync as workload_sync
from scheduler.workloads.api import serializers as s
from scheduler.workloads.filtersets import WorkloadFilter
from scheduler.workloads.models import Workload
from tenants.api.views import visible_tenant
from tenants.models import ApiToken, QuotaGrant


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


class WorkloadViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    PortalGenericViewSet,
):
    queryset = Workload.objects.select_related("tenant", "submitted_by")
    serializer_class = s.WorkloadSerializer
    filterset_class = WorkloadFilter
    ordering_fields = ["created_at", "state", "name"]
    write_scope = ApiToken.Scope.SUBMIT

    def get_queryset(self):
        qs = super().get_queryset()
        if self.action == "retrieve":
            qs = qs.prefetch_related("events")
        return qs

    def get_serializer_class(self):
        return s.WorkloadDetailSerializer if self.action == "retrieve" else s.WorkloadSerializer

    @extend_schema(
        request=s.WorkloadCreateSerializer,
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
                    },
                },
            ),
        ],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        data = s.WorkloadCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = dict(data.validated_data)
        tenant = visible_tenant(request.user, v.pop("tenant"))
        workload = workloads.submit_workload(actor=request.user, tenant=tenant, **v)
        workload = self.get_queryset().get(pk=workload.pk)
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
        pod, text = workload_sync.workload_logs(
            kube.gateway(), actor=request.user, workload=self.get_object(), tail_lines=tail
        )
        return Response({"pod": pod, "log": text})
