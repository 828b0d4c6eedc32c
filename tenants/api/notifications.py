"""Notification channels and the delivery log by API. A webhook's signing secret is in the
create answer only (stored encrypted, never shown again)."""

from __future__ import annotations

from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api.idempotency import IDEMPOTENCY_PARAMETER, idempotent
from core.api.viewsets import PortalReadOnlyViewSet
from tenants.api.views import visible_tenant
from tenants.models import ApiToken, NotificationChannel, NotificationDelivery
from tenants.notifications import EVENTS
from tenants.services import channels as channel_services


class NotificationChannelSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True, allow_null=True)
    target = serializers.SerializerMethodField()

    class Meta:
        model = NotificationChannel
        fields = ["id", "tenant", "kind", "name", "target", "events", "active", "created_at"]
        read_only_fields = fields

    def get_target(self, channel: NotificationChannel) -> str:
        return channel.shown_target


class NotificationChannelCreateSerializer(serializers.Serializer):
    tenant = serializers.CharField(
        required=False, allow_null=True, help_text="tenant slug; empty: the platform team's"
    )
    kind = serializers.ChoiceField(choices=NotificationChannel.Kind.choices)
    name = serializers.CharField(max_length=80)
    target = serializers.CharField(max_length=500, help_text="e-mail addresses or https:// URL")
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=sorted(EVENTS)), required=False, default=list
    )


class NotificationChannelUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(required=False)
    target = serializers.CharField(required=False, help_text="e-mail addresses or https:// URL")
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=sorted(EVENTS)),
        required=False,
        help_text="the events sent here; an empty list: the default of its scope",
    )


class NotificationChannelCreatedSerializer(NotificationChannelSerializer):
    secret = serializers.CharField(
        read_only=True, allow_null=True, help_text="the webhook's signing secret; shown once"
    )

    class Meta(NotificationChannelSerializer.Meta):
        fields = [*NotificationChannelSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class NotificationDeliverySerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True, allow_null=True)
    channel = serializers.CharField(source="channel.name", read_only=True, allow_null=True)

    class Meta:
        model = NotificationDelivery
        fields = [
            "id",
            "event",
            "tenant",
            "channel",
            "subject",
            "state",
            "attempts",
            "next_attempt_at",
            "response_status",
            "last_error",
            "created_at",
            "sent_at",
        ]
        read_only_fields = fields


class NotificationChannelViewSet(
    mixins.CreateModelMixin, mixins.DestroyModelMixin, PortalReadOnlyViewSet
):
    """A tenant's channels (its members see them, its owners change them) and the platform
    team's (platform admins). By token: `admin` scope only."""

    queryset = NotificationChannel.objects.filter(active=True).select_related("tenant")
    serializer_class = NotificationChannelSerializer
    filterset_fields = ["kind"]
    write_scope = ApiToken.Scope.ADMIN

    @extend_schema(
        request=NotificationChannelCreateSerializer,
        responses={201: NotificationChannelCreatedSerializer},
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    @idempotent(secret_fields=("secret",))
    def create(self, request, *args, **kwargs):
        data = NotificationChannelCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        slug = v.get("tenant")
        channel, secret = channel_services.create_channel(
            actor=request.user,
            tenant=visible_tenant(request.user, slug) if slug else None,
            kind=v["kind"],
            name=v["name"],
            target=v["target"],
            events=v["events"],
        )
        body = NotificationChannelCreatedSerializer(channel).data
        body["secret"] = secret
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=NotificationChannelUpdateSerializer, responses=NotificationChannelSerializer
    )
    def partial_update(self, request, *args, **kwargs):
        """Rename it, point it elsewhere or pick its events; a webhook keeps its secret."""
        data = NotificationChannelUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        channel = channel_services.change_channel(
            actor=request.user, channel=self.get_object(), **data.validated_data
        )
        return Response(NotificationChannelSerializer(channel).data)

    def destroy(self, request, *args, **kwargs):
        channel_services.remove_channel(actor=request.user, channel=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={202: NotificationDeliverySerializer})
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        """Send a test message to this channel (see it in the delivery log)."""
        delivery = channel_services.send_test_message(actor=request.user, channel=self.get_object())
        return Response(
            NotificationDeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED
        )


class NotificationDeliveryFilter(filters.FilterSet):
    tenant = filters.CharFilter(field_name="tenant__slug")

    class Meta:
        model = NotificationDelivery
        fields = ["tenant", "state", "event", "channel"]


class NotificationDeliveryViewSet(PortalReadOnlyViewSet):
    """The delivery log: what was sent where, how many tries, the last error."""

    queryset = NotificationDelivery.objects.select_related("tenant", "channel")
    serializer_class = NotificationDeliverySerializer
    filterset_class = NotificationDeliveryFilter
    ordering_fields = ["created_at"]
