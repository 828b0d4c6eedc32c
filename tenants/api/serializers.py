"""Serializers of the governance core; writes go through services, never `serializer.save()`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalog import slices
from tenants.models import ApiToken, AuditEvent, CapacityRequest, Membership, QuotaGrant, Tenant
from tenants.models.notifications import shown_target
from tenants.models.priority_classes import PRIORITY_CLASSES
from tenants.models.tenants import dns_label
from tenants.selectors import quota_lines_for, slice_lines


class QuotaLineSerializer(serializers.Serializer):
    resource_class = serializers.CharField()
    granted = serializers.IntegerField()
    in_use = serializers.IntegerField(help_text="units the team's admitted work holds of quota")
    free = serializers.IntegerField(help_text="granted less in_use: what may still be admitted")
    running = serializers.IntegerField(
        help_text="of in_use, units of pods placed on nodes and running now"
    )
    summary = serializers.CharField(
        help_text='the line as the pages say it: "N × shape (= X of Y slices)", Y the '
        "team's grant of the GPU model in compute slices"
    )


class HeldShapeSerializer(serializers.Serializer):
    resource_class = serializers.CharField()
    units = serializers.IntegerField()
    slices = serializers.IntegerField()


class SliceLineSerializer(serializers.Serializer):
    gpu_model = serializers.CharField()
    granted = serializers.IntegerField()
    in_use = serializers.IntegerField()
    free = serializers.IntegerField()
    held = HeldShapeSerializer(many=True)
    summary = serializers.CharField()


class QueueLineSerializer(serializers.Serializer):
    flavor = serializers.CharField(help_text="the GPU model's Kueue ResourceFlavor")
    resource = serializers.CharField()
    nominal = serializers.IntegerField(help_text="the team's own quota (its grants)")
    used = serializers.IntegerField(help_text="by its admitted work, borrowed units included")
    borrowed = serializers.IntegerField(help_text="of used, what is above its own quota")
    lent = serializers.IntegerField(help_text="of its own idle quota, what others use now")


class QueueSerializer(serializers.Serializer):
    """The team's Kueue ClusterQueue as last read (the console's Queues page)."""

    queue = serializers.CharField()
    lines = QueueLineSerializer(many=True)
    pending = serializers.IntegerField(help_text="workloads waiting in the queue")
    admitted = serializers.IntegerField()
    active = serializers.BooleanField(help_text="false: the queue admits nothing")
    reason = serializers.CharField()


def page_quota(tenant_ids: list[int]) -> dict[int, dict]:
    """The quota lines of a page of tenants, per resource class and per model in slices, from
    the one read model, and where each team's grants run (four queries a page)."""
    out = {}
    where = dict(
        QuotaGrant.objects.filter(tenant_id__in=tenant_ids)
        .holding()
        .values_list("tenant_id", "placement")
    )
    for tenant_id, lines in quota_lines_for(tenant_ids).items():
        out[tenant_id] = {
            "placement": where.get(tenant_id, ""),
            "quota": [
                {
                    "resource_class": line.resource_class.slug,
                    "granted": line.granted,
                    "in_use": line.in_use,
                    "free": line.free,
                    "running": line.running,
                    "summary": line.summary,
                }
                for line in lines
            ],
            "slices": [
                {
                    "gpu_model": m.gpu_model,
                    "granted": m.granted,
                    "in_use": m.in_use,
                    "free": m.free,
                    "held": [
                        {
                            "resource_class": rc.slug,
                            "units": units,
                            "slices": units * slices.slices_per_unit(rc),
                        }
                        for rc, units in m.held
                    ],
                    "summary": m.summary,
                }
                for m in slice_lines(lines)
            ],
        }
    return out


class TenantListSerializer(serializers.ListSerializer):
    """Computes the quota lines of the whole page at once (constant queries per page)."""

    def to_representation(self, data):
        items = list(data.all() if hasattr(data, "all") else data)
        self.child._page_quota = page_quota([t.pk for t in items])  # type: ignore[union-attr]
        return super().to_representation(items)


class TenantSerializer(serializers.ModelSerializer):
    namespace = serializers.SerializerMethodField()
    quota = serializers.SerializerMethodField()
    slices = serializers.SerializerMethodField()
    reconcile_status = serializers.SerializerMethodField()
    queue = serializers.SerializerMethodField()
    placement = serializers.SerializerMethodField()

    class Meta:
        model = Tenant
        list_serializer_class = TenantListSerializer
        fields = [
            "slug",
            "name",
            "status",
            "cost_centre",
            "monthly_budget",
            "gpu_ceiling",
            "allowed_priority_classes",
            "critical_gpu_quota",
            "fair_share_weight",
            "max_run_s",
            "idle_threshold_pct",
            "idle_warn_after_s",
            "idle_suspend_after_s",
            "idle_protect_s",
            "namespace",
            "quota",
            "slices",
            "reconcile_status",
            "queue",
            "placement",
            "created_at",
        ]
        read_only_fields = fields

    def get_placement(self, tenant: Tenant) -> str:
        """Where its grants run: "" the portal's own cluster, `cluster:<worker>`, `group:<g>`."""
        return str(self._quota(tenant).get("placement", ""))

    def get_namespace(self, tenant: Tenant) -> str:
        return tenant.namespace

    def _quota(self, tenant: Tenant) -> dict:
        quota = getattr(self, "_page_quota", None)
        if quota is None or tenant.pk not in quota:  # a single object: compute it for this one
            quota = self._page_quota = page_quota([tenant.pk])
        return quota[tenant.pk]

    @extend_schema_field(QuotaLineSerializer(many=True))
    def get_quota(self, tenant: Tenant) -> list:
        return self._quota(tenant)["quota"]

    @extend_schema_field(SliceLineSerializer(many=True))
    def get_slices(self, tenant: Tenant) -> list:
        """Per GPU model in compute slices, what the grants of all its classes add up to and
        what holds them (the unit Kueue counts when GPU_QUOTA_UNIT is slices)."""
        return self._quota(tenant)["slices"]

    @staticmethod
    def _sync_state(tenant: Tenant):
        """The tenant's sync state, read once (a missing one is not cached by Django)."""
        if "_sync_state" not in tenant.__dict__:
            tenant.__dict__["_sync_state"] = getattr(tenant, "sync_state", None)
        return tenant.__dict__["_sync_state"]

    def get_reconcile_status(self, tenant: Tenant) -> str:
        state = self._sync_state(tenant)
        return state.status if state else "pending"

    @extend_schema_field(QueueSerializer(allow_null=True))
    def get_queue(self, tenant: Tenant) -> dict | None:
        """The team's Kueue queue as last read; null until the cluster has been read."""
        state = self._sync_state(tenant)
        return (state.queue_status or None) if state else None


class TenantCreateSerializer(serializers.Serializer):
    # The slug's rule in the schema too (a `pattern`), so clients and the fuzz can meet it.
    slug = serializers.RegexField(
        dns_label.regex, max_length=40, error_messages={"invalid": dns_label.message}
    )
    name = serializers.CharField(max_length=120)
    cost_centre = serializers.CharField(max_length=40, required=False, default="")
    gpu_ceiling = serializers.DecimalField(
        max_digits=8, decimal_places=2, required=False, allow_null=True
    )
    monthly_budget = serializers.DecimalField(
        max_digits=12, decimal_places=2, required=False, allow_null=True
    )
    allowed_priority_classes = serializers.ListField(
        child=serializers.ChoiceField(choices=PRIORITY_CLASSES), required=False
    )


class TenantUpdateSerializer(serializers.Serializer):
    """What a platform admin may change of a tenant (`services.EDITABLE_TENANT_FIELDS`)."""

    name = serializers.CharField(max_length=120, required=False)
    cost_centre = serializers.CharField(max_length=40, required=False, allow_blank=True)
    gpu_ceiling = serializers.DecimalField(
        max_digits=8, decimal_places=2, min_value=0, required=False, allow_null=True
    )
    monthly_budget = serializers.DecimalField(
        max_digits=12, decimal_places=2, min_value=0, required=False, allow_null=True
    )
    allowed_priority_classes = serializers.ListField(
        child=serializers.ChoiceField(choices=PRIORITY_CLASSES), required=False
    )
    critical_gpu_quota = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False)
    # Kueue fair sharing: 2 takes twice the share of idle capacity of a team at 1
    fair_share_weight = serializers.DecimalField(
        max_digits=6, decimal_places=2, min_value=0, max_value=1000, required=False
    )
    # null: the pools' limits only. The service checks the range and says what to change.
    max_run_s = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="most seconds any job of the team may run before Kueue stops it (a pool's "
        "limit, when smaller, wins); null: the pools' limits only",
    )
    # The team's idle policy: a workload gets the strictest of its team's and its pools'. The
    # service checks the ranges and the order and says what to change.
    idle_threshold_pct = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="below this % GPU use a workload of the team is idle (1-100); null: the "
        "pools' policies only",
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


class MembershipSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "tenant", "username", "role", "source", "created_at"]
        read_only_fields = fields


class MembershipCreateSerializer(serializers.Serializer):
    tenant = serializers.CharField(help_text="tenant slug")
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class MembershipUpdateSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class CapacityRequestSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    requester = serializers.CharField(source="requester.username", read_only=True)
    decided_by = serializers.CharField(
        source="decided_by.username", read_only=True, allow_null=True
    )
    items = serializers.SerializerMethodField()

    class Meta:
        model = CapacityRequest
        fields = [
            "id",
            "tenant",
            "requester",
            "items",
            "starts_at",
            "ends_at",
            "justification",
            "state",
            "auto_approved",
            "policy_reasons",
            "decided_by",
            "decided_at",
            "decision_comment",
            "extends",
            "created_at",
        ]
        read_only_fields = fields

    def get_items(self, request: CapacityRequest) -> dict[str, int]:
        return {i.resource_class.slug: i.amount for i in request.items.all()}


class CapacityRequestCreateSerializer(serializers.Serializer):
    tenant = serializers.CharField(help_text="tenant slug")
    items = serializers.DictField(
        child=serializers.IntegerField(min_value=1), help_text="resource class slug -> units"
    )
    starts_at = serializers.DateTimeField(required=False, allow_null=True)
    ends_at = serializers.DateTimeField(allow_null=True, help_text="null: open-ended")
    justification = serializers.CharField()


class GrantExtendSerializer(serializers.Serializer):
    ends_at = serializers.DateTimeField(help_text="the grant's new end")
    justification = serializers.CharField(required=False, allow_blank=True, default="")


class TenantPlaceSerializer(serializers.Serializer):
    placement = serializers.CharField(
        allow_blank=True,
        max_length=60,
        help_text='"" the portal\'s own cluster, "cluster:<worker>" or "group:<group>"',
    )
    comment = serializers.CharField(required=False, allow_blank=True, default="")


class GrantEndSerializer(serializers.Serializer):
    ends_at = serializers.DateTimeField(help_text="the grant's new, earlier end")
    comment = serializers.CharField(required=False, allow_blank=True, default="")


class CommentSerializer(serializers.Serializer):
    comment = serializers.CharField(required=False, allow_blank=True, default="")


class QuotaGrantSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    resource_class = serializers.CharField(source="resource_class.slug", read_only=True)

    class Meta:
        model = QuotaGrant
        fields = [
            "id",
            "tenant",
            "resource_class",
            "amount",
            "starts_at",
            "ends_at",
            "state",
            "placement",
            "request",
            "created_at",
            "ended_at",
        ]
        read_only_fields = fields


class ApiTokenSerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "user",
            "prefix",
            "scopes",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "created_at",
        ]
        read_only_fields = fields


class ApiTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=80)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=ApiToken.Scope.choices))
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    username = serializers.CharField(
        required=False, help_text="for whom (default: yourself; owners: their CI robot)"
    )


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The secret; shown this once only")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class AuditEventSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True, allow_null=True)

    def to_representation(self, instance):
        """A channel's Slack URL is cut in rows written before the services cut it too."""
        data = super().to_representation(instance)
        if instance.object_type == "tenants.NotificationChannel":
            for side in ("before", "after"):
                row = data.get(side)
                if isinstance(row, dict) and "target" in row:
                    row["target"] = shown_target(row.get("kind", ""), row["target"])
        return data

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "created_at",
            "actor_repr",
            "tenant",
            "verb",
            "object_type",
            "object_id",
            "object_repr",
            "before",
            "after",
            "request_id",
        ]
        read_only_fields = fields
