import django_filters

from core.filters import UTCDateTimeFilter
from tenants.models import AuditEvent, CapacityRequest, Tenant


class AuditEventFilter(django_filters.FilterSet):
    """Shared by the console's audit log and the API."""

    verb = django_filters.CharFilter(lookup_expr="icontains", label="Verb contains")
    actor = django_filters.CharFilter(field_name="actor_repr", lookup_expr="icontains")
    tenant = django_filters.ModelChoiceFilter(queryset=Tenant.objects.all(), to_field_name="slug")
    object_type = django_filters.CharFilter()
    object_id = django_filters.CharFilter()
    request_id = django_filters.CharFilter()
    since = UTCDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = UTCDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = [
            "verb",
            "actor",
            "tenant",
            "object_type",
            "object_id",
            "request_id",
            "since",
            "until",
        ]


class CapacityRequestFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=CapacityRequest.State.choices)
    tenant = django_filters.ModelChoiceFilter(queryset=Tenant.objects.all(), to_field_name="slug")

    class Meta:
        model = CapacityRequest
        fields = ["state", "tenant"]
