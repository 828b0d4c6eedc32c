"""The capacity calendar by API (issue 52): the same series the pages draw, from
`tenants.calendars`: per class and day, the units free, granted and booked; with `tenant`, the
team's own; for a platform admin, the teams behind each day and the asks waiting."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from catalog.models import ResourceClass
from core.api.viewsets import PortalGenericViewSet
from core.errors import InvalidInput
from core.permissions import is_platform_admin
from tenants import calendars
from tenants.api.views import visible_tenant


class CalendarQuery(serializers.Serializer):
    resource_class = serializers.CharField(required=False, help_text="one class's slug")
    tenant = serializers.CharField(required=False, help_text="a team's slug: its own units too")
    weeks = serializers.IntegerField(
        min_value=1, max_value=calendars.MAX_WEEKS, default=calendars.WEEKS
    )


class CapacityCalendarViewSet(PortalGenericViewSet):
    """Free, granted and booked units of each pooled class, day by day from today."""

    queryset = ResourceClass.objects.filter(active=True, pool__isnull=False).order_by("slug")

    def get_queryset(self):
        return self.queryset  # the pools are everyone's to see, as on the ask form

    @extend_schema(
        parameters=[
            OpenApiParameter("resource_class", str, description="one class's slug"),
            OpenApiParameter("tenant", str, description="a team's slug: its own units too"),
            OpenApiParameter("weeks", int, description=f"1 to {calendars.MAX_WEEKS}"),
        ],
        responses={200: dict},
    )
    def list(self, request):
        query = CalendarQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        v = query.validated_data
        classes = self.get_queryset()
        if v.get("resource_class"):
            classes = classes.filter(slug=v["resource_class"])
            if not classes.exists():
                slug = v["resource_class"]
                raise InvalidInput(
                    f"unknown resource class {slug!r}; see /api/v1/resource-classes/",
                    field="resource_class",
                )
        tenant = visible_tenant(request.user, v["tenant"]) if v.get("tenant") else None
        found = calendars.class_calendars(
            classes, weeks=v["weeks"], tenant=tenant, console=is_platform_admin(request.user)
        )
        return Response({"calendars": [c.as_series() for c in found]})
