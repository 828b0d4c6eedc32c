"""Share and unshare from a workspace's page (the owner's form); the services decide."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from core.errors import ServiceError
from workspaces import sharing
from workspaces.models import Workspace


def _act(request, pk, act, said: str):
    ws = get_object_or_404(
        Workspace.objects.visible_to(request.user).select_related("tenant"), pk=pk
    )
    username = request.POST.get("user", "")
    try:
        act(actor=request.user, workspace=ws, username=username)
        messages.success(request, said.format(ws=ws.name, user=username.strip()))
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect("workspaces:workspace_detail", pk=pk)


@login_required
@require_POST
def workspace_share(request, pk):
    return _act(request, pk, sharing.share_workspace, "{ws} is shared with {user}.")


@login_required
@require_POST
def workspace_unshare(request, pk):
    return _act(request, pk, sharing.unshare_workspace, "{ws} is no longer shared with {user}.")
