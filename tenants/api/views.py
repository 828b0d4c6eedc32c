"""Thin API views of the governance core: parse, call one service, render."""

from __future__ import annotations

from django.db.models import OuterRef, Subquery
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api.idempotency import IDEMPOTENCY_PARAMETER, idempotent
from core.api.viewsets import PortalGenericViewSet, PortalReadOnlyViewSet
from core.errors import InvalidInput, NotFound
from tenants.api import serializers as s
from tenants.filtersets import AuditEventFilter
from tenants.models import ApiToken, AuditEvent, CapacityRequest, Membership, QuotaGrant, Tenant
from tenants.permissions import remember_role
from tenants.services import approvals as approval_services
from tenants.services import grants as grant_services
from tenants.services import placing
from tenants.services import renewals as renewal_services
from tenants.services import requests as request_services
from tenants.services import tenants as tenant_services
from tenants.services import tokens as token_services

Scope = ApiToken.Scope


def visible_tenant(user, slug: str) -> Tenant:
    """The tenant `slug` if the caller may see it; otherwise 404 (never confirm it exists).
    The same query reads the caller's role in it, which the tenant remembers for this request:
    a service's role check (`require_role`) then asks no second query."""
    tenants = Tenant.objects.visible_to(user).filter(slug=slug)
    authenticated = getattr(user, "is_authenticated", False)
    if authenticated:
        # a correlated subquery, found by the (tenant, user) unique index
        role = Membership.objects.filter(tenant=OuterRef("pk"), user=user).order_by().values("role")
        tenants = tenants.annotate(caller_role=Subquery(role))
    tenant = tenants.first()
    if tenant is None:
        raise NotFound(f"no tenant {slug!r}", field="tenant")
    if authenticated:
        remember_role(tenant, user, tenant.caller_role)  # type: ignore[attr-defined]
    return tenant


class TenantViewSet(mixins.CreateModelMixin, PortalReadOnlyViewSet):
    """Tenants the caller belongs to (platform admins: all), with namespace, quota and in-use."""

    queryset = Tenant.objects.select_related("sync_state")
    serializer_class = s.TenantSerializer
    lookup_field = "slug"
    filterset_fields = ["status"]
    ordering_fields = ["slug", "created_at"]
    write_scope = Scope.APPROVE  # creating and suspending tenants is platform work
    http_method_names = ["get", "post", "patch", "head", "options"]

    @extend_schema(
        request=s.TenantCreateSerializer,
        responses={201: s.TenantSerializer},
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        data = s.TenantCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = tenant_services.create_tenant(actor=request.user, **data.validated_data)
        return Response(s.TenantSerializer(tenant).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.TenantUpdateSerializer, responses=s.TenantSerializer)
    def partial_update(self, request, slug=None):
        data = s.TenantUpdateSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        if not data.validated_data:
            raise InvalidInput(
                f"give one of {', '.join(sorted(s.TenantUpdateSerializer().fields))}"
            )
        tenant = tenant_services.update_tenant(
            actor=request.user, tenant=self.get_object(), **data.validated_data
        )
        return Response(s.TenantSerializer(tenant).data)

    def _status(self, request, action_name: str):
        tenant = tenant_services.change_tenant_status(
            actor=request.user, tenant=self.get_object(), action=action_name
        )
        return Response(s.TenantSerializer(tenant).data)

    @extend_schema(request=None, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def suspend(self, request, slug=None):
        return self._status(request, "suspend")

    @extend_schema(request=None, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request, slug=None):
        return self._status(request, "resume")

    @extend_schema(request=None, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def archive(self, request, slug=None):
        return self._status(request, "archive")

    @extend_schema(request=s.TenantPlaceSerializer, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def place(self, request, slug=None):
        """A platform admin moves where the team's grants run: "" the portal's own cluster,
        `cluster:<worker>` or `group:<group>` (MultiKueue dispatches its queue there)."""
        data = s.TenantPlaceSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = self.get_object()
        placing.place_team(
            actor=request.user,
            tenant=tenant,
            placement_value=data.validated_data["placement"],
            comment=data.validated_data["comment"],
        )
        return Response(s.TenantSerializer(self.get_queryset().get(pk=tenant.pk)).data)


class MembershipFilter(filters.FilterSet):
    tenant = filters.CharFilter(field_name="tenant__slug")

    class Meta:
        model = Membership
        fields = ["tenant", "role"]


class MembershipViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    PortalGenericViewSet,
):
    """Members of the tenants the caller sees; owners and platform admins change them."""

    queryset = Membership.objects.select_related("tenant", "user")
    serializer_class = s.MembershipSerializer
    filterset_class = MembershipFilter
    ordering_fields = ["created_at", "role"]
    # Tokens change members only with the `admin` scope (platform automation); an owner's
    # token never may: owners manage their members in the browser.
    write_scope = Scope.ADMIN
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self):
        # Membership has no visible_to of its own: scope through the tenants.
        return self.queryset.filter(tenant__in=Tenant.objects.visible_to(self.request.user))

    @extend_schema(
        request=s.MembershipCreateSerializer,
        responses={201: s.MembershipSerializer},
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        data = s.MembershipCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = visible_tenant(request.user, data.validated_data["tenant"])
        membership = tenant_services.add_member(
            actor=request.user,
            tenant=tenant,
            username=data.validated_data["username"],
            role=data.validated_data["role"],
        )
        return Response(s.MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.MembershipUpdateSerializer, responses=s.MembershipSerializer)
    def partial_update(self, request, *args, **kwargs):
        data = s.MembershipUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = tenant_services.change_member_role(
            actor=request.user, membership=self.get_object(), role=data.validated_data["role"]
        )
        return Response(s.MembershipSerializer(membership).data)

    def update(self, request, *args, **kwargs):
        return self.partial_update(request, *args, **kwargs)

    def destroy(self, request, *args, **kwargs):
        tenant_services.remove_member(actor=request.user, membership=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class CapacityRequestFilter(filters.FilterSet):
    tenant = filters.CharFilter(field_name="tenant__slug")

    class Meta:
        model = CapacityRequest
        fields = ["tenant", "state"]


class CapacityRequestViewSet(mixins.CreateModelMixin, PortalReadOnlyViewSet):
    queryset = CapacityRequest.objects.select_related(
        "tenant", "requester", "decided_by"
    ).prefetch_related("items__resource_class")
    serializer_class = s.CapacityRequestSerializer
    filterset_class = CapacityRequestFilter
    ordering_fields = ["created_at", "state"]
    write_scope = Scope.REQUEST
    scopes = {"approve": Scope.APPROVE, "reject": Scope.APPROVE, "cancel": Scope.REQUEST}

    @extend_schema(
        request=s.CapacityRequestCreateSerializer,
        responses={201: s.CapacityRequestSerializer},
        parameters=[IDEMPOTENCY_PARAMETER],
        examples=[
            OpenApiExample(
                "Two MIG slices for a month",
                request_only=True,
                value={
                    "tenant": "team-a",
                    "items": {"a100-80gb-mig-3g.40gb": 2},
                    "ends_at": "2027-01-31T00:00:00Z",
                    "justification": "fine-tuning run for the Q1 model",
                },
            )
        ],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        data = s.CapacityRequestCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        req = request_services.submit_capacity_request(
            actor=request.user,
            tenant=visible_tenant(request.user, v["tenant"]),
            items=v["items"],
            starts_at=v.get("starts_at"),
            ends_at=v["ends_at"],
            justification=v["justification"],
        )
        req = self.get_queryset().get(pk=req.pk)
        return Response(s.CapacityRequestSerializer(req).data, status=status.HTTP_201_CREATED)

    def _decide(self, request, fn):
        data = s.CommentSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        req = fn(
            actor=request.user, request=self.get_object(), comment=data.validated_data["comment"]
        )
        return Response(s.CapacityRequestSerializer(self.get_queryset().get(pk=req.pk)).data)

    @extend_schema(request=s.CommentSerializer, responses=s.CapacityRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        return self._decide(request, approval_services.approve_capacity_request)

    @extend_schema(request=s.CommentSerializer, responses=s.CapacityRequestSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        return self._decide(request, request_services.reject_capacity_request)

    @extend_schema(request=s.CommentSerializer, responses=s.CapacityRequestSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        return self._decide(request, request_services.cancel_capacity_request)


class QuotaGrantFilter(filters.FilterSet):
    tenant = filters.CharFilter(field_name="tenant__slug")
    resource_class = filters.CharFilter(field_name="resource_class__slug")

    class Meta:
        model = QuotaGrant
        fields = ["tenant", "resource_class", "state"]


class QuotaGrantViewSet(PortalReadOnlyViewSet):
    queryset = QuotaGrant.objects.select_related("tenant", "resource_class")
    serializer_class = s.QuotaGrantSerializer
    filterset_class = QuotaGrantFilter
    ordering_fields = ["created_at", "ends_at"]
    scopes = {"extend": Scope.REQUEST, "set_end": Scope.APPROVE}

    @extend_schema(
        request=s.GrantExtendSerializer,
        responses={201: s.CapacityRequestSerializer},
        parameters=[IDEMPOTENCY_PARAMETER],
        examples=[
            OpenApiExample(
                "A week more",
                request_only=True,
                value={"ends_at": "2027-02-07T00:00:00Z", "justification": "the run needs it"},
            )
        ],
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def extend(self, request, pk=None):
        """Ask to extend this grant: a renewal request (`extends` is this grant), approved at
        once inside the policy envelope, otherwise queued for the platform team."""
        data = s.GrantExtendSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        renewal = renewal_services.submit_grant_renewal(
            actor=request.user, grant=self.get_object(), **data.validated_data
        )
        renewal = CapacityRequest.objects.select_related("tenant", "requester", "decided_by").get(
            pk=renewal.pk
        )
        return Response(s.CapacityRequestSerializer(renewal).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.GrantEndSerializer, responses=s.QuotaGrantSerializer)
    @action(detail=True, methods=["post"], url_path="set-end")
    def set_end(self, request, pk=None):
        """A platform admin gives this grant an end, or an earlier one (an open-ended grant
        blocks every booking of its units until it has one)."""
        data = s.GrantEndSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        grant = grant_services.set_grant_end(
            actor=request.user, grant=self.get_object(), **data.validated_data
        )
        return Response(s.QuotaGrantSerializer(self.get_queryset().get(pk=grant.pk)).data)


class ApiTokenViewSet(mixins.CreateModelMixin, PortalReadOnlyViewSet):
    """Your tokens and those of the CI robots of the tenants you own (platform admins: all),
    by `ApiToken.objects.visible_to`, the rule the tokens page uses too. The secret is in the
    create answer only."""

    queryset = ApiToken.objects.select_related("user")
    serializer_class = s.ApiTokenSerializer
    filterset_fields = ["name"]
    ordering_fields = ["created_at", "expires_at"]
    # A token can neither mint tokens nor revoke others; it may revoke itself (`revoke`).
    scopes = {"create": None, "revoke": Scope.READ}

    @extend_schema(
        request=s.ApiTokenCreateSerializer,
        responses={201: s.ApiTokenCreatedSerializer},
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    @idempotent(secret_fields=("token",))  # the secret is shown once: never kept nor replayed
    def create(self, request, *args, **kwargs):
        data = s.ApiTokenCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        token, raw = token_services.issue_token(
            actor=request.user,
            user=token_services.token_holder(actor=request.user, username=v.get("username")),
            name=v["name"],
            scopes=v["scopes"],
            expires_at=v.get("expires_at"),
        )
        body = s.ApiTokenCreatedSerializer(token).data
        body["token"] = raw
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.ApiTokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        token = self.get_object()
        if isinstance(request.auth, ApiToken) and request.auth.pk != token.pk:
            raise NotFound("a token may revoke only itself; use the browser for others")
        return Response(
            s.ApiTokenSerializer(token_services.revoke_token(actor=request.user, token=token)).data
        )


class AuditEventApiFilter(AuditEventFilter):
    """The console's filter, with `tenant` a slug as on every other list of the API: another
    team's slug finds nothing, as a missing one does. (A choice among all tenants answered 400
    for a missing slug but 200 for another team's, confirming that it exists.)"""

    tenant = filters.CharFilter(field_name="tenant__slug")


class AuditEventViewSet(PortalReadOnlyViewSet):
    queryset = AuditEvent.objects.select_related("tenant")
    serializer_class = s.AuditEventSerializer
    filterset_class = AuditEventApiFilter
    ordering_fields = ["created_at"]
