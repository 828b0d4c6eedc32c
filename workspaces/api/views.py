"""The workspaces' API: list, read, open, stop, restart, share, unshare; the page's services."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api.idempotency import idempotent
from core.api.viewsets import PortalGenericViewSet
from tenants.api.views import visible_tenant
from tenants.models import ApiToken
from workspaces import services, sharing
from workspaces.api import serializers as s
from workspaces.links import link
from workspaces.models import Workspace


class WorkspaceViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, PortalGenericViewSet
):
    queryset = Workspace.objects.select_related("tenant", "owner", "run").prefetch_related(
        "shared_with"
    )
    serializer_class = s.WorkspaceSerializer
    ordering_fields = ["created_at", "name"]
    write_scope = ApiToken.Scope.SUBMIT

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "link": link}

    def _shown(self, ws: Workspace, code: int = status.HTTP_200_OK) -> Response:
        fresh = self.get_queryset().get(pk=ws.pk)
        return Response(
            s.WorkspaceSerializer(fresh, context=self.get_serializer_context()).data, status=code
        )

    @extend_schema(
        request=s.WorkspaceOpenSerializer,
        responses={201: s.WorkspaceSerializer},
        description="Open a workspace on a class the team's grant covers. 400 says what to "
        "change (no grant for the class, an image off the allow-list, a time limit out of "
        "range, a priority the team may not use: each bad field in `errors`); 409 `workspace_cap` "
        "when the caller holds the team's cap of running ones.",
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        data = s.WorkspaceOpenSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = dict(data.validated_data)
        tenant = visible_tenant(request.user, v.pop("tenant"))
        ws = services.open_workspace(actor=request.user, tenant=tenant, **v)
        return self._shown(ws, status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.WorkspaceSerializer)
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        return self._shown(services.stop_workspace(actor=request.user, workspace=self.get_object()))

    @extend_schema(request=None, responses=s.WorkspaceSerializer)
    @action(detail=True, methods=["post"])
    def restart(self, request, pk=None):
        ws = services.restart_workspace(actor=request.user, workspace=self.get_object())
        return self._shown(ws)

    def _shared(self, request, act) -> Response:
        data = s.WorkspaceShareSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        ws = act(
            actor=request.user, workspace=self.get_object(), username=data.validated_data["user"]
        )
        return self._shown(ws)

    @extend_schema(
        request=s.WorkspaceShareSerializer,
        responses=s.WorkspaceSerializer,
        description="Let a teammate (an owner or member of the team) open it; its owner only. "
        "400 names what to change (not a teammate, shared already).",
    )
    @action(detail=True, methods=["post"])
    def share(self, request, pk=None):
        return self._shared(request, sharing.share_workspace)

    @extend_schema(
        request=s.WorkspaceShareSerializer,
        responses=s.WorkspaceSerializer,
        description="Stop sharing it with a teammate; its owner only. Their open tabs are "
        "refused at the proxy's next check with the portal.",
    )
    @action(detail=True, methods=["post"])
    def unshare(self, request, pk=None):
        return self._shared(request, sharing.unshare_workspace)
