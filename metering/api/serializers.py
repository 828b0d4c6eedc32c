from __future__ import annotations

from rest_framework import serializers

from metering.models import AllocationInterval, Budget, PriceRule


class AllocationIntervalSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True, default=None)
    resource_class = serializers.CharField(
        source="resource_class.slug", read_only=True, default=None
    )
    util_mean = serializers.DecimalField(max_digits=8, decimal_places=4, read_only=True)
    seen_until = serializers.DateTimeField(
        read_only=True, help_text="end, or for a running pod the last minute it was seen"
    )

    class Meta:
        model = AllocationInterval
        fields = [
            "id",
            "tenant",
            "namespace",
            "pod_name",
            "pod_uid",
            "node_name",
            "resource_class",
            "resource_name",
            "gpu_model",
            "units",
            "workload",
            "started_at",
            "seen_until",
            "ended_at",
            "end_reason",
            "util_mean",
            "fb_used_mib",
        ]


class PriceRuleSerializer(serializers.ModelSerializer):
    resource_class = serializers.CharField(
        source="resource_class.slug", read_only=True, default=None
    )

    class Meta:
        model = PriceRule
        fields = ["id", "resource_class", "price_per_hour", "effective_from", "created_at"]


class PriceRuleCreateSerializer(serializers.Serializer):
    resource_class = serializers.CharField()
    price_per_hour = serializers.DecimalField(max_digits=10, decimal_places=4)
    effective_from = serializers.DateTimeField()


class BudgetSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True, default=None)

    class Meta:
        model = Budget
        fields = ["id", "tenant", "month", "amount"]


class StatementLineSerializer(serializers.Serializer):
    resource_class = serializers.CharField()
    name = serializers.CharField()
    gpu_fraction = serializers.CharField()
    allocated_hours = serializers.CharField()
    allocated_gpu_hours = serializers.CharField()
    allocated_cost = serializers.CharField()
    quota_hours = serializers.CharField()
    quota_gpu_hours = serializers.CharField()
    quota_cost = serializers.CharField()
    billed_cost = serializers.CharField()
    observed_hours = serializers.CharField()
    used_hours = serializers.CharField()
    idle_hours = serializers.CharField()
    idle_cost = serializers.CharField()
    waived_hours = serializers.CharField(help_text="unit-hours on GPUs that failed, not billed")
    waived_cost = serializers.CharField(help_text="what those hours would have cost")


class StatementSerializer(serializers.Serializer):
    """A tenant's monthly statement (decimal strings, in BILLING_CURRENCY)."""

    tenant = serializers.CharField()
    cost_centre = serializers.CharField()
    month = serializers.CharField()
    basis = serializers.CharField()
    currency = serializers.CharField()
    window = serializers.DictField()
    lines = StatementLineSerializer(many=True)
    totals = serializers.DictField()
    budget = serializers.CharField(allow_null=True)


class DepartmentTeamSpendSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    allocated_gpu_hours = serializers.CharField()
    idle_cost = serializers.CharField()
    total = serializers.CharField(help_text="what its statement bills (or shows, in showback)")


class DepartmentSpendSerializer(serializers.Serializer):
    """A department's month: its teams' statements summed against its own budget."""

    department = serializers.CharField()
    month = serializers.CharField()
    currency = serializers.CharField()
    cost = serializers.CharField()
    budget = serializers.CharField(allow_null=True)
    percent = serializers.IntegerField(allow_null=True)
    forecast = serializers.CharField(allow_null=True, help_text="at the month-so-far rate")
    teams = DepartmentTeamSpendSerializer(many=True)
