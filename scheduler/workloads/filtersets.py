"""The filters of a workload list, shared by the browser and the API."""

import django_filters

from scheduler.workloads.models import Workload


class WorkloadFilter(django_filters.FilterSet):
    """Shared by the browser's workload list and the API."""

    tenant = django_filters.CharFilter(field_name="tenant__slug")
    name = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Workload
        fields = ["tenant", "state", "kind", "name", "priority_class"]
