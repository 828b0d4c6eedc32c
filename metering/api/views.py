"""Thin API views of metering: statements (JSON and CSV), allocation intervals, prices, budgets.
Statements come from `metering.selectors.month_statements`, as on the page and in the export."""

from __future__ import annotations

from datetime import date

from django.conf import settings
from django.http import HttpResponse
from django.utils import timezone
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from catalog.models import ResourceClass
from core.api.viewsets import PortalGenericViewSet, PortalReadOnlyViewSet
from core.errors import Forbidden, InvalidInput, NotFound
from core.filters import UTCIsoDateTimeFilter
from metering import department_budgets, exports, pricing, selectors, services
from metering.api import serializers as s
from metering.models import AllocationInterval, Budget, PriceRule
from tenants.models import ApiToken, Department, Tenant
from tenants.services.departments import can_see_department_spend

MONTH = OpenApiParameter("month", str, description="YYYY-MM (default: this month)")
BASIS = OpenApiParameter("basis", str, enum=list(pricing.BASES), description="default: setting")


def _month(request) -> date:
    try:
        return selectors.parse_month(request.query_params.get("month"))
    except ValueError as exc:
        raise InvalidInput(str(exc), field="month") from None


def _basis(request) -> str:
    basis = request.query_params.get("basis") or settings.BILLING_BASIS
    if basis not in pricing.BASES:
        raise InvalidInput(f"basis must be one of {list(pricing.BASES)}", field="basis")
    return basis


def statement_dicts(tenants: list[Tenant], month: date, basis: str) -> list[dict]:
    statements = selectors.month_statements(month, [t.pk for t in tenants], basis=basis)
    return [
        exports.statement_dict(t, month, statements[t.pk], selectors.budget_for(t, month))
        for t in tenants
    ]


def csv_response(rows: list[dict], filename: str) -> HttpResponse:
    response = HttpResponse(exports.statements_csv(rows), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


class StatementViewSet(PortalGenericViewSet):
    """Monthly statements of the tenants the caller may see (platform admins: all)."""

    queryset = Tenant.objects.all()
    lookup_field = "slug"
    serializer_class = s.StatementSerializer
    filter_backends: list = []

    @extend_schema(parameters=[MONTH, BASIS], responses=s.StatementSerializer(many=True))
    def list(self, request):
        month, basis = _month(request), _basis(request)
        page = self.paginate_queryset(list(self.get_queryset().order_by("slug")))
        return self.get_paginated_response(statement_dicts(page or [], month, basis))

    @extend_schema(parameters=[MONTH, BASIS], responses=s.StatementSerializer)
    def retrieve(self, request, slug=None):
        tenant = self.get_object()
        return Response(statement_dicts([tenant], _month(request), _basis(request))[0])

    @extend_schema(
        operation_id="usage_statements_csv_all",
        parameters=[MONTH, BASIS],
        responses={(200, "text/csv"): str},
    )
    @action(detail=False, methods=["get"], url_path="csv")
    def csv_all(self, request):
        """Chargeback export: one CSV line per tenant and resource class."""
        month, basis = _month(request), _basis(request)
        rows = statement_dicts(list(self.get_queryset().order_by("slug")), month, basis)
        return csv_response(rows, f"gpu-chargeback-{month:%Y-%m}.csv")

    @extend_schema(
        operation_id="usage_statements_csv_one",
        parameters=[MONTH, BASIS],
        responses={(200, "text/csv"): str},
    )
    @action(detail=True, methods=["get"], url_path="csv")
    def csv_one(self, request, slug=None):
        tenant = self.get_object()
        month = _month(request)
        rows = statement_dicts([tenant], month, _basis(request))
        return csv_response(rows, f"gpu-statement-{tenant.slug}-{month:%Y-%m}.csv")


class DepartmentSpendViewSet(PortalGenericViewSet):
    """A department's spend in a month by team, against its budget: for its admins and the
    platform team (a member of one of its teams gets a 403: not the other teams' costs)."""

    queryset = Department.objects.all()
    lookup_field = "slug"
    lookup_value_regex = r"[a-z0-9-]+"
    serializer_class = s.DepartmentSpendSerializer
    filter_backends: list = []

    @extend_schema(parameters=[MONTH], responses=s.DepartmentSpendSerializer)
    def retrieve(self, request, slug=None):
        department = self.get_object()
        if not can_see_department_spend(request.user, department):
            raise Forbidden(f"only {department.slug}'s admins and platform admins see its spend")
        spent = department_budgets.spend(department, _month(request), timezone.now())
        return Response(spent.as_dict(department))


class IntervalFilter(filters.FilterSet):
    tenant = filters.CharFilter(field_name="tenant__slug")
    open = filters.BooleanFilter(field_name="ended_at", lookup_expr="isnull")
    since = UTCIsoDateTimeFilter(field_name="started_at", lookup_expr="gte")

    class Meta:
        model = AllocationInterval
        fields = ["tenant", "open", "since", "gpu_model", "namespace", "end_reason"]


class AllocationIntervalViewSet(PortalReadOnlyViewSet):
    """Pods that held GPUs, as intervals (UTC)."""

    queryset = AllocationInterval.objects.with_seen_until().select_related(
        "tenant", "resource_class"
    )
    serializer_class = s.AllocationIntervalSerializer
    filterset_class = IntervalFilter
    ordering_fields = ["started_at", "ended_at"]


class BudgetViewSet(PortalReadOnlyViewSet):
    queryset = Budget.objects.select_related("tenant")
    serializer_class = s.BudgetSerializer
    filterset_fields = ["month"]


class PriceRuleViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """The price table: every signed-in caller reads it; the platform team adds rules."""

    queryset = PriceRule.objects.select_related("resource_class")
    serializer_class = s.PriceRuleSerializer
    filterset_fields = ["resource_class__slug"]
    write_scope = ApiToken.Scope.APPROVE

    @extend_schema(request=s.PriceRuleCreateSerializer, responses={201: s.PriceRuleSerializer})
    def create(self, request, *args, **kwargs):
        body = s.PriceRuleCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        rc = ResourceClass.objects.filter(slug=body.validated_data["resource_class"]).first()
        if rc is None:
            raise NotFound("no such resource class", field="resource_class")
        rule = services.set_price(
            actor=request.user,
            resource_class=rc,
            price_per_hour=body.validated_data["price_per_hour"],
            effective_from=body.validated_data["effective_from"],
        )
        return Response(s.PriceRuleSerializer(rule).data, status=status.HTTP_201_CREATED)
