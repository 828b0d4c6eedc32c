"""The auto-approval policy by API, for platform automation (a platform admin's session, or a
token with the `admin` scope). Every write goes through the same service the admin console
uses, so it is checked and audited the same way. Pools are the catalog's (catalog/api)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers
from rest_framework.response import Response

from catalog.api.views import resource_class_by_slug
from core.api.viewsets import PlatformViewSet
from tenants.models import AutoApprovalRule
from tenants.services import policy_rules


class AutoApprovalRuleSerializer(serializers.ModelSerializer):
    resource_class = serializers.CharField(source="resource_class.slug", read_only=True)

    class Meta:
        model = AutoApprovalRule
        fields = ["resource_class", "max_amount", "max_duration_hours"]
        read_only_fields = fields


class AutoApprovalRuleUpdateSerializer(serializers.Serializer):
    max_amount = serializers.IntegerField(min_value=0, max_value=2**31 - 1)
    max_duration_hours = serializers.IntegerField(min_value=0, max_value=2**31 - 1)


class AutoApprovalRuleViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PlatformViewSet):
    """The policy envelope: asks within it are approved at once."""

    queryset = AutoApprovalRule.objects.order_by("resource_class__slug")
    serializer_class = AutoApprovalRuleSerializer

    @extend_schema(request=AutoApprovalRuleUpdateSerializer, responses=AutoApprovalRuleSerializer)
    def update(self, request, resource_class=None):
        """Set the envelope of a resource class (created when it has none yet)."""
        data = AutoApprovalRuleUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rule = policy_rules.set_auto_approval_rule(
            actor=request.user,
            resource_class=resource_class_by_slug(resource_class),
            **data.validated_data,
        )
        return Response(AutoApprovalRuleSerializer(rule).data)

    @extend_schema(request=AutoApprovalRuleUpdateSerializer, responses=AutoApprovalRuleSerializer)
    def partial_update(self, request, resource_class=None):
        return self.update(request, resource_class=resource_class)
