"""What the workspaces API takes and answers."""

from rest_framework import serializers

from workspaces.models import Workspace


class WorkspaceSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    owner = serializers.CharField(source="owner.get_username", read_only=True)
    state = serializers.CharField(read_only=True)
    run = serializers.IntegerField(source="run_id", read_only=True, allow_null=True)
    link = serializers.SerializerMethodField()

    class Meta:
        model = Workspace
        fields = [
            "id",
            "tenant",
            "name",
            "kind",
            "image",
            "resource_class",
            "home_size",
            "time_limit_s",
            "owner",
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


class WorkspaceOpenSerializer(serializers.Serializer):
    """The shape only; the service checks the values and says what to change."""

    tenant = serializers.CharField(max_length=63)
    name = serializers.CharField(max_length=100)
    kind = serializers.CharField(max_length=20, default="jupyter")
    image = serializers.CharField(max_length=300)
    resource_class = serializers.CharField(max_length=100)
    time_limit_h = serializers.DecimalField(max_digits=8, decimal_places=3)
    home_size = serializers.CharField(max_length=32, required=False, allow_blank=True)
