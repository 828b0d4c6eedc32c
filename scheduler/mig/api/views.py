"""Elastic layouts by API, per GPU model of the catalog: platform admins read them (a model
never set shows the settings' defaults) and set them through `reshaping.set_policy`, the
same check and audit the product uses everywhere."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.response import Response

from catalog import facts
from core.api.scopes import TokenScope
from core.api.viewsets import PortalViewSetMixin
from core.errors import NotFound
from core.permissions import is_platform_admin
from scheduler.mig import reshaping
from scheduler.mig.api.serializers import ElasticLayoutSerializer, ElasticLayoutUpdateSerializer
from scheduler.mig.models import ElasticLayout


def _shown(model_key: str) -> dict:
    policy = reshaping.policy_for(model_key)
    return {
        "gpu_model": model_key,
        "paused": policy.paused,
        "min_wait_s": int(policy.min_wait_s),
        "max_gpus_per_hour": policy.max_gpus_per_hour,
        "gpus_reshaped_last_hour": reshaping.changed_last_hour(model_key, timezone.now()),
        "configured": ElasticLayout.objects.filter(gpu_model=model_key).exists(),
    }


def _mig_models() -> list[str]:
    return sorted(k for k, m in facts.load_catalog().items() if m.mig_capable)


class ElasticLayoutViewSet(PortalViewSetMixin, viewsets.ViewSet):
    """Layouts that follow the queue, per MIG-capable GPU model."""

    lookup_field = "gpu_model"
    lookup_value_regex = r"[A-Za-z0-9.-]+"
    write_scope = TokenScope.ADMIN
    http_method_names = ["get", "put", "head", "options"]

    def _model(self, gpu_model: str) -> str:
        if not is_platform_admin(self.request.user) or gpu_model not in _mig_models():
            raise NotFound(f"no MIG-capable GPU model {gpu_model!r}", field="gpu_model")
        return gpu_model

    @extend_schema(responses=ElasticLayoutSerializer(many=True))
    def list(self, request):
        models = _mig_models() if is_platform_admin(request.user) else []
        return Response([ElasticLayoutSerializer(_shown(m)).data for m in models])

    @extend_schema(responses=ElasticLayoutSerializer)
    def retrieve(self, request, gpu_model=None):
        return Response(ElasticLayoutSerializer(_shown(self._model(gpu_model or ""))).data)

    @extend_schema(request=ElasticLayoutUpdateSerializer, responses=ElasticLayoutSerializer)
    def update(self, request, gpu_model=None):
        model = self._model(gpu_model or "")
        data = ElasticLayoutUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reshaping.set_policy(actor=request.user, gpu_model=model, **data.validated_data)
        return Response(ElasticLayoutSerializer(_shown(model)).data)
