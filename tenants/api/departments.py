"""Departments by API (`/api/v1/departments/`): read by platform admins, the department's admins
and its teams' members; changed by platform admins (the `admin` scope); its admins list and
decide its teams' asks (the `approve` scope). Every write is a service call, checked and
audited as in the console."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api.viewsets import PortalGenericViewSet
from core.errors import Forbidden, NotFound
from core.permissions import is_platform_admin
from tenants.api import serializers as s
from tenants.models import ApiToken, CapacityRequest, Department, Tenant
from tenants.services import approvals as approval_services
from tenants.services import departments as department_services
from tenants.services import requests as request_services

Scope = ApiToken.Scope


class DepartmentSerializer(serializers.ModelSerializer):
    admins = serializers.SerializerMethodField()
    teams = serializers.SerializerMethodField()
    quota = serializers.SerializerMethodField()

    class Meta:
        model = Department
        fields = [
            "slug",
            "name",
            "cost_centre",
            "monthly_budget",
            "auto_approve",
            "admins",
            "teams",
            "quota",
            "created_at",
        ]
        read_only_fields = fields

    def get_admins(self, obj) -> list[str]:
        return sorted(u.get_username() for u in obj.admins.all())

    def get_teams(self, obj) -> list[str]:
        return sorted(t.slug for t in obj.teams.all())

    def get_quota(self, obj) -> list[dict]:
        """Per GPU model: slices, held by its teams, lending and borrowing limits."""
        return department_services.department_use(obj)


class DepartmentWriteSerializer(serializers.Serializer):
    slug = serializers.CharField(max_length=40, required=False)
    name = serializers.CharField(max_length=120, required=False)
    cost_centre = serializers.CharField(max_length=40, required=False, allow_blank=True)
    monthly_budget = serializers.DecimalField(
        max_digits=12, decimal_places=2, required=False, allow_null=True
    )
    auto_approve = serializers.BooleanField(required=False)


class QuotaSerializer(serializers.Serializer):
    gpu_model = serializers.CharField(max_length=40)
    slices = serializers.IntegerField(min_value=0, max_value=2**31 - 1)
    lending_limit = serializers.IntegerField(
        min_value=0, max_value=2**31 - 1, required=False, allow_null=True
    )
    borrowing_limit = serializers.IntegerField(
        min_value=0, max_value=2**31 - 1, required=False, allow_null=True
    )


class AdminsSerializer(serializers.Serializer):
    admins = serializers.ListField(child=serializers.CharField(max_length=150), max_length=100)


class TeamSerializer(serializers.Serializer):
    tenant = serializers.CharField(max_length=40)


class EnvelopeSerializer(serializers.Serializer):
    resource_class = serializers.CharField(max_length=100)
    max_amount = serializers.IntegerField(min_value=0, max_value=2**31 - 1, allow_null=True)
    max_duration_hours = serializers.IntegerField(
        min_value=0, max_value=2**31 - 1, required=False, default=0
    )


class DecisionSerializer(s.CommentSerializer):
    request = serializers.IntegerField(min_value=1, max_value=2**63 - 1)


class DepartmentViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    PortalGenericViewSet,
):
    queryset = Department.objects.prefetch_related("admins", "teams", "quotas")
    serializer_class = DepartmentSerializer
    lookup_field = "slug"
    lookup_value_regex = r"[a-z0-9-]+"
    write_scope = Scope.ADMIN
    scopes = {"approve": Scope.APPROVE, "reject": Scope.APPROVE}

    def _show(self, department: Department, code=status.HTTP_200_OK) -> Response:
        fresh = self.get_queryset().get(pk=department.pk)
        return Response(DepartmentSerializer(fresh).data, status=code)

    @extend_schema(request=DepartmentWriteSerializer, responses={201: DepartmentSerializer})
    def create(self, request):
        data = DepartmentWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        department = department_services.create_department(
            actor=request.user,
            slug=fields.pop("slug", ""),
            name=fields.pop("name", ""),
            **fields,
        )
        return self._show(department, status.HTTP_201_CREATED)

    @extend_schema(request=DepartmentWriteSerializer, responses=DepartmentSerializer)
    def partial_update(self, request, slug=None):
        data = DepartmentWriteSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        fields.pop("slug", None)
        department = department_services.update_department(
            actor=request.user, department=self.get_object(), **fields
        )
        return self._show(department)

    def perform_destroy(self, instance):
        department_services.delete_department(actor=self.request.user, department=instance)

    @extend_schema(request=QuotaSerializer, responses=DepartmentSerializer)
    @action(detail=True, methods=["post"])
    def quota(self, request, slug=None):
        """Set the department's quota of a GPU model, in slices (0 and no limits: remove it)."""
        data = QuotaSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        department = self.get_object()
        department_services.set_department_quota(
            actor=request.user, department=department, **data.validated_data
        )
        return self._show(department)

    @extend_schema(request=AdminsSerializer, responses=DepartmentSerializer)
    @action(detail=True, methods=["post"])
    def admins(self, request, slug=None):
        """Who approves its teams' asks within its quota (the whole list)."""
        data = AdminsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        department = self.get_object()
        department_services.set_department_admins(
            actor=request.user, department=department, usernames=data.validated_data["admins"]
        )
        return self._show(department)

    def _team(self, request) -> Tenant:
        data = TeamSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        team = Tenant.objects.visible_to(request.user).filter(slug=data.validated_data["tenant"])
        found = team.first()
        if found is None:
            raise NotFound(f"no tenant {data.validated_data['tenant']!r}")
        return found

    @extend_schema(request=TeamSerializer, responses=DepartmentSerializer)
    @action(detail=True, methods=["post"], url_path="add-team")
    def add_team(self, request, slug=None):
        department = self.get_object()
        department_services.assign_team(
            actor=request.user, tenant=self._team(request), department=department
        )
        return self._show(department)

    @extend_schema(request=TeamSerializer, responses=DepartmentSerializer)
    @action(detail=True, methods=["post"], url_path="remove-team")
    def remove_team(self, request, slug=None):
        department = self.get_object()
        team = self._team(request)
        if team.department_id != department.pk:
            raise NotFound(f"{team.slug} is not in {department.slug}")
        department_services.assign_team(actor=request.user, tenant=team, department=None)
        return self._show(department)

    @extend_schema(request=EnvelopeSerializer, responses=DepartmentSerializer)
    @action(detail=True, methods=["post"])
    def envelope(self, request, slug=None):
        """The department's own auto-approval envelope of a class (max_amount null: the
        platform's applies again)."""
        data = EnvelopeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        department = self.get_object()
        department_services.set_department_envelope(
            actor=request.user,
            department=department,
            resource_class=v["resource_class"],
            max_amount=v["max_amount"],
            hours=v["max_duration_hours"],
        )
        return self._show(department)

    @extend_schema(responses=s.CapacityRequestSerializer(many=True))
    @action(detail=True, methods=["get"])
    def requests(self, request, slug=None):
        """Its teams' asks waiting for a decision: for its admins and the platform team only (a
        member of one team must not read another team's asks and justifications)."""
        department = self.get_object()
        if not (
            is_platform_admin(request.user)
            or department_services.is_department_admin(request.user, department)
        ):
            raise Forbidden(f"only {department.slug}'s admins and the platform team see its asks")
        waiting = (
            CapacityRequest.objects.filter(
                tenant__department=department, state=CapacityRequest.State.SUBMITTED
            )
            .select_related("tenant", "requester", "decided_by")
            .prefetch_related("items__resource_class")
            .order_by("created_at")
        )
        return Response(s.CapacityRequestSerializer(waiting, many=True).data)

    def _decide(self, request, fn):
        data = DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        department = self.get_object()
        ask = CapacityRequest.objects.filter(
            pk=data.validated_data["request"], tenant__department=department
        ).first()
        if ask is None:
            raise NotFound(f"no request #{data.validated_data['request']} in {department.slug}")
        decided = fn(actor=request.user, request=ask, comment=data.validated_data["comment"])
        return Response(s.CapacityRequestSerializer(decided).data)

    @extend_schema(request=DecisionSerializer, responses=s.CapacityRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, slug=None):
        """Approve a team's ask: a department admin within the department's quota (403 above
        it), a platform admin at any amount."""
        return self._decide(request, approval_services.approve_capacity_request)

    @extend_schema(request=DecisionSerializer, responses=s.CapacityRequestSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, slug=None):
        return self._decide(request, request_services.reject_capacity_request)
