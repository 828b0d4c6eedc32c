"""Pools and the auto-approval policy by API, for platform automation (a platform admin's
session, or a token with the `admin` scope). Every write goes through the same services the
admin console uses, so it is checked and audited the same way."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers
from rest_framework.response import Response

from core.api.viewsets import PortalGenericViewSet
from core.errors import NotFound
from core.permissions import is_platform_admin
from scheduler.catalog.models import Pool, ResourceClass
from tenants.models import ApiToken, AutoApprovalRule
from tenants.services import pools as pool_services


class PoolSerializer(serializers.ModelSerializer):
    resource_class = serializers.CharField(source="resource_class.slug", read_only=True)
    grantable = serializers.IntegerField(read_only=True)

    class Meta:
        model = Pool
        fields = [
            "resource_class",
            "capacity",
            "overcommit_ratio",
            "grantable",
            "source",
            "borrowing_limit",
            "lend_idle",
            "updated_at",
        ]
        read_only_fields = fields


class PoolUpdateSerializer(serializers.Serializer):
    capacity = serializers.IntegerField(min_value=0, required=False)
    overcommit_ratio = serializers.DecimalField(
        max_digits=5, decimal_places=2, min_value=0, required=False
    )
    borrowing_limit = serializers.IntegerField(min_value=0, required=False)
    lend_idle = serializers.BooleanField(required=False)


class AutoApprovalRuleSerializer(serializers.ModelSerializer):
    resource_class = serializers.CharField(source="resource_class.slug", read_only=True)

    class Meta:
        model = AutoApprovalRule
        fields = ["resource_class", "max_amount", "max_duration_hours"]
        read_only_fields = fields


class AutoApprovalRuleUpdateSerializer(serializers.Serializer):
    max_amount = serializers.IntegerField(min_value=0, max_value=2**31 - 1)
    max_duration_hours = serializers.IntegerField(min_value=0, max_value=2**31 - 1)


def _resource_class(slug: str) -> ResourceClass:
    resource_class = ResourceClass.objects.filter(slug=slug).first()
    if resource_class is None:
        raise NotFound(f"no resource class {slug!r}", field="resource_class")
    return resource_class


class _PlatformOnly(PortalGenericViewSet):
    """Readable by platform admins only (others see an empty list and 404s); every write needs
    the `admin` scope from a token, and a platform admin behind it, which the service checks."""

    lookup_field = "resource_class__slug"
    lookup_url_kwarg = "resource_class"
    lookup_value_regex = r"[a-z0-9.-]+"
    write_scope = ApiToken.Scope.ADMIN
    http_method_names = ["get", "put", "patch", "head", "options"]

    def get_queryset(self):
        queryset = self.queryset.select_related("resource_class")  # type: ignore[union-attr]
        return queryset if is_platform_admin(self.request.user) else queryset.none()


class PoolViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _PlatformOnly):
    """Pools: capacity, overcommit and cohort policy per resource class."""

    queryset = Pool.objects.all()
    serializer_class = PoolSerializer

    @extend_schema(request=PoolUpdateSerializer, responses=PoolSerializer)
    def partial_update(self, request, resource_class=None):
        data = PoolUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        pool = pool_services.set_pool(
            actor=request.user,
            resource_class=_resource_class(resource_class),
            **data.validated_data,
        )
        return Response(PoolSerializer(pool).data)

    @extend_schema(request=PoolUpdateSerializer, responses=PoolSerializer)
    def update(self, request, resource_class=None):
        """Set a pool (created for the class when it has none yet)."""
        return self.partial_update(request, resource_class=resource_class)


class AutoApprovalRuleViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _PlatformOnly):
    """The policy envelope: asks within it are approved at once."""

    queryset = AutoApprovalRule.objects.order_by("resource_class__slug")
    serializer_class = AutoApprovalRuleSerializer

    @extend_schema(request=AutoApprovalRuleUpdateSerializer, responses=AutoApprovalRuleSerializer)
    def update(self, request, resource_class=None):
        """Set the envelope of a resource class (created when it has none yet)."""
        data = AutoApprovalRuleUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rule = pool_services.set_auto_approval_rule(
            actor=request.user,
            resource_class=_resource_class(resource_class),
            **data.validated_data,
        )
        return Response(AutoApprovalRuleSerializer(rule).data)

    @extend_schema(request=AutoApprovalRuleUpdateSerializer, responses=AutoApprovalRuleSerializer)
    def partial_update(self, request, resource_class=None):
        return self.update(request, resource_class=resource_class)
