"""A pool as the API shows it, and what a platform admin may change of it."""

from __future__ import annotations

from rest_framework import serializers

from catalog.models import MAX_GRANT_DAYS, Pool


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
            "outside_use",
            "outside_namespaces",
            "borrowing_limit",
            "lend_idle",
            "reclaim_grace_s",
            "max_run_s",
            "max_grant_days",
            "idle_threshold_pct",
            "idle_warn_after_s",
            "idle_suspend_after_s",
            "idle_protect_s",
            "updated_at",
        ]
        read_only_fields = fields


class PoolUpdateSerializer(serializers.Serializer):
    capacity = serializers.IntegerField(min_value=0, required=False)
    overcommit_ratio = serializers.DecimalField(
        max_digits=5, decimal_places=2, min_value=0, required=False
    )
    # null: no limit (a team may borrow whatever the others leave idle)
    borrowing_limit = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    lend_idle = serializers.BooleanField(required=False)
    reclaim_grace_s = serializers.IntegerField(min_value=0, max_value=7 * 24 * 3600, required=False)
    # null: no limit. The service checks the range (whole seconds ≥ 1) and says what to change.
    max_run_s = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="most seconds a job on this class may run before Kueue stops it (a team's "
        "own limit, when smaller, wins); null: no limit",
    )
    max_grant_days = serializers.IntegerField(min_value=1, max_value=MAX_GRANT_DAYS, required=False)
    # Idle GPUs given back. The service checks the ranges and the order (suspend after the
    # warning) and says what to change.
    idle_threshold_pct = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="below this % GPU use a workload on the class is idle (1-100); null: off",
    )
    idle_warn_after_s = serializers.IntegerField(
        required=False, help_text="seconds idle before the owners are warned"
    )
    idle_suspend_after_s = serializers.IntegerField(
        required=False, help_text="seconds idle before the workload is suspended"
    )
    idle_protect_s = serializers.IntegerField(
        required=False, help_text="seconds after a start or resume during which nothing is done"
    )
