"""Clusters by API, for platform automation (a platform admin's session, or a token with the
`admin` scope): list and read them with their last health check, register a worker, change
one, archive one. Every write is the service the console calls (fleet.py), checked and
audited the same way."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api.scopes import TokenScope
from core.api.viewsets import PortalGenericViewSet
from core.errors import InvalidInput
from scheduler.cluster import fleet, inventory
from scheduler.cluster.api.serializers import ClusterSerializer, ClusterWriteSerializer
from scheduler.cluster.models import Cluster

# What someone may try to send instead of a reference to a Secret.
SECRET_FIELDS = ("kubeconfig", "token", "credentials")


def _refuse_secrets(data) -> None:
    sent = sorted(set(SECRET_FIELDS) & set(data))
    if sent:
        raise InvalidInput(
            "the portal keeps no kubeconfig or token: put the kubeconfig in a Secret on the "
            "manager (key `kubeconfig`) and send credentials_secret_namespace and "
            "credentials_secret_name",
            field=sent[0],
        )


class ClusterViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalGenericViewSet):
    """Registered clusters: the portal's own (standalone or manager) and the workers."""

    queryset = Cluster.objects.order_by("archived_at", "preference", "name")
    serializer_class = ClusterSerializer
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9-]+"
    write_scope = TokenScope.ADMIN
    http_method_names = ["get", "post", "patch", "head", "options"]

    def _data(self, partial: bool) -> dict:
        _refuse_secrets(self.request.data)
        data = ClusterWriteSerializer(data=self.request.data, partial=partial)
        data.is_valid(raise_exception=True)
        return dict(data.validated_data)

    @extend_schema(request=ClusterWriteSerializer, responses={201: ClusterSerializer})
    def create(self, request):
        fields = self._data(partial=False)
        if not fields.get("name"):
            raise InvalidInput("name the cluster (a DNS label, e.g. gpu-east)", field="name")
        cluster = fleet.register_cluster(actor=request.user, **fields)
        return Response(ClusterSerializer(cluster).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ClusterWriteSerializer, responses=ClusterSerializer)
    def partial_update(self, request, name=None):
        fields = self._data(partial=True)
        if "name" in fields and fields.pop("name") != name:
            raise InvalidInput(
                "a cluster's name cannot change (MultiKueue's objects and its usage are keyed "
                "by it): register another and archive this one",
                field="name",
            )
        cluster = fleet.update_cluster(actor=request.user, cluster=self.get_object(), **fields)
        return Response(ClusterSerializer(cluster).data)

    @extend_schema(request=None, responses=ClusterSerializer)
    @action(detail=True, methods=["post"])
    def archive(self, request, name=None):
        """The portal stops governing it; its usage history stays."""
        cluster = inventory.archive_cluster(actor=request.user, cluster=self.get_object())
        return Response(ClusterSerializer(cluster).data)
