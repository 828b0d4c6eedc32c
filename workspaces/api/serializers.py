"""What the workspaces API takes and answers."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from workspaces.models import Workspace


class WorkspaceSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    owner = serializers.CharField(source="owner.get_username", read_only=True)
    state = serializers.CharField(read_only=True)
    run = serializers.IntegerField(source="run_id", read_only=True, allow_null=True)
    link = serializers.SerializerMethodField()
    priority = serializers.SerializerMethodField(
        help_text="the priority class its run is at (a restart keeps it); null before any run"
    )
    shared_with = serializers.SerializerMethodField(
        help_text="the teammates its owner lets open it besides themselves (owner-only if empty)"
    )

    class Meta:
        model = Workspace
        fields = [
            "id",
            "tenant",
            "name",
            "kind",
            "image",
            "resource_class",
            "priority",
            "home_size",
            "time_limit_s",
            "owner",
            "shared_with",
            "state",
            "run",
            "runs",
            "link",
            "last_activity",
            "activity_seen_at",
            "created_at",
        ]
        read_only_fields = fields

    def get_link(self, ws: Workspace) -> str:
        return self.context["link"](ws)

    @extend_schema_field({"type": "array", "items": {"type": "string"}})
    def get_shared_with(self, ws: Workspace) -> list[str]:
        return sorted(person.get_username() for person in ws.shared_with.all())

    @extend_schema_field(OpenApiTypes.STR)
    def get_priority(self, ws: Workspace) -> str | None:
        return ws.run.priority_class if ws.run is not None else None


class WorkspaceOpenSerializer(serializers.Serializer):
    """The shape only; the service checks the values and says what to change."""

    tenant = serializers.CharField(max_length=63)
    name = serializers.CharField(max_length=100)
    kind = serializers.CharField(max_length=20, default="jupyter")
    image = serializers.CharField(max_length=300)
    resource_class = serializers.CharField(max_length=100)
    time_limit_h = serializers.DecimalField(max_digits=8, decimal_places=3)
    home_size = serializers.CharField(max_length=32, required=False, allow_blank=True)
    priority = serializers.CharField(
        max_length=63,
        required=False,
        allow_blank=True,
        help_text="the priority class its runs are at, one the team may use below gpu-critical "
        "(a 400 names them); empty: the lowest the team may use. A higher one preempts "
        "teammates' lower-priority jobs while it runs",
    )


class WorkspaceShareSerializer(serializers.Serializer):
    user = serializers.CharField(
        max_length=150, help_text="the username of a teammate (an owner or member of the team)"
    )
