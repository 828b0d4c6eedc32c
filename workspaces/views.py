"""Workspaces in the browser: the team's list with the form that opens one, a workspace's page
(state, link, idle timer, last activity, with whom it is shared), stop, restart, and the
one-click open that sends the browser to the workspace's own origin. The same services as
everywhere; objects only through `visible_to(user)`."""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from catalog.run_limits import duration_words
from core.errors import ClusterError, ServiceError
from tenants import display
from tenants.models import Tenant
from tenants.permissions import can_ask
from workspaces import access, services, sharing, tickets
from workspaces.culling import cull_policy, facts_for
from workspaces.idleness import stops_at
from workspaces.links import ENTER_PATH, link, origin
from workspaces.manifests import path_prefix
from workspaces.models import Workspace

# the open form's fields: a refusal of one of them is said under it, the others on top
FORM_FIELDS = ("name", "kind", "image", "resource_class", "priority", "time_limit_h", "home_size")


def refusals_by_field(exc: ServiceError) -> tuple[str | None, dict[str, list[str]]]:
    """What the form says on top (None: only "correct the fields marked below") and under each
    of its fields, as the submit form does (issue 49, 6)."""
    errors = {name: said for name, said in exc.errors.items() if name in FORM_FIELDS}
    elsewhere = [w for name, said in exc.errors.items() if name not in FORM_FIELDS for w in said]
    if not errors:
        return exc.detail, {}
    return (" ".join(elsewhere) or None), errors


@login_required
def workspace_list(request, slug):
    tenant = get_object_or_404(Tenant.objects.visible_to(request.user), slug=slug)
    status, form = 200, {}
    error: str | None = None
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        form = request.POST
        try:
            ws = services.open_workspace(
                actor=request.user,
                tenant=tenant,
                name=form.get("name"),
                kind=form.get("kind"),
                image=form.get("image"),
                resource_class=form.get("resource_class"),
                time_limit_h=form.get("time_limit_h"),
                home_size=form.get("home_size") or None,
                priority=form.get("priority") or None,
            )
            messages.success(request, f"{ws.name} is starting: it waits for its GPU in the queue.")
            return redirect("workspaces:workspace_detail", pk=ws.pk)
        except ServiceError as exc:  # a 400 or 409 that says what to change, the form kept
            status = exc.status
            error, errors = refusals_by_field(exc)
    workspaces = list(Workspace.objects.filter(tenant=tenant).select_related("run", "owner"))
    names = display.class_names({ws.resource_class for ws in workspaces})
    for ws in workspaces:  # the catalog's names, not slugs
        ws.gpu_label = names.get(ws.resource_class, ws.resource_class)
    context = {
        "tenant": tenant,
        "workspaces": workspaces,
        "can_open": tenant.is_active and can_ask(request.user, tenant),
        "kinds": Workspace.Kind.choices,
        # only what the team can open, smallest first, with what it has free
        "classes": services.class_choices(tenant),
        "priorities": services.workspace_priorities(tenant),
        "error": error,
        "errors": errors,
        "form": form,
        "default_image": settings.WORKSPACE_DEFAULT_IMAGE,
        "default_home": settings.WORKSPACE_HOME_SIZE,
        "max_hours": settings.WORKSPACE_MAX_TIME_LIMIT_S // 3600,
    }
    return render(request, "workspaces/workspace_list.html", context, status=status)


@login_required
def workspace_detail(request, pk):
    ws = get_object_or_404(
        Workspace.objects.visible_to(request.user).select_related("run", "tenant", "owner"), pk=pk
    )
    policy = cull_policy(ws.tenant)
    ends = None
    if ws.state == Workspace.State.RUNNING:
        ends = stops_at(policy, facts_for(ws, ws.last_activity, None))
    context = {
        "ws": ws,
        "link": link(ws),
        "origin": origin(ws),
        # the catalog's name, not the slug (issue 49, 6)
        "gpu_label": display.class_names([ws.resource_class]).get(
            ws.resource_class, ws.resource_class
        ),
        "idle_after": duration_words(policy.idle_after_s),
        "threshold": policy.threshold_pct,
        "stops_at": ends,
        "time_limit": duration_words(ws.time_limit_s),
        "can_act": can_ask(request.user, ws.tenant),
        "may_open": access.may_open(request.user, ws),
        "shared_with": list(ws.shared_with.order_by("username")),
        "can_share": sharing.may_share(request.user, ws),
        "teammates": sharing.share_choices(ws) if sharing.may_share(request.user, ws) else [],
    }
    return render(request, "workspaces/workspace_detail.html", context)


@login_required
@require_POST
def workspace_stop(request, pk):
    ws = get_object_or_404(Workspace.objects.visible_to(request.user), pk=pk)
    try:
        services.stop_workspace(actor=request.user, workspace=ws)
        messages.success(request, f"{ws.name} stopped; its home volume is kept.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect("workspaces:workspace_detail", pk=pk)


@login_required
@require_POST
def workspace_restart(request, pk):
    ws = get_object_or_404(Workspace.objects.visible_to(request.user), pk=pk)
    try:
        services.restart_workspace(actor=request.user, workspace=ws)
        messages.success(request, f"{ws.name} is starting again on its home volume.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    except ClusterError as exc:  # rolled back: still stopped
        messages.error(request, f"the cluster did not take the change, try again: {exc}")
    return redirect("workspaces:workspace_detail", pk=pk)


@login_required
@require_GET
def workspace_open(request, pk):
    """One click: the portal checks the person, then sends the browser to the workspace's own
    origin with a one-time ticket its proxy exchanges for a workspace cookie."""
    ws = get_object_or_404(
        Workspace.objects.visible_to(request.user).select_related("tenant", "owner"), pk=pk
    )
    if access.decide_access(request.user, ws) != access.ALLOWED:
        return render(request, "workspaces/workspace_refused.html", {"ws": ws}, status=403)
    if ws.state != Workspace.State.RUNNING:
        messages.error(request, f"{ws.name} is {ws.state}: open it once it runs.")
        return redirect("workspaces:workspace_detail", pk=pk)
    ticket = tickets.mint_ticket(ws.pk, request.user.pk)
    query = urlencode({"ticket": ticket, "next": path_prefix(ws.tenant.namespace, ws.name)})
    response = redirect(f"{origin(ws)}{ENTER_PATH}?{query}")
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


def _share_act(request, pk, act, said: str):
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
    return _share_act(request, pk, sharing.share_workspace, "{ws} is shared with {user}.")


@login_required
@require_POST
def workspace_unshare(request, pk):
    return _share_act(
        request, pk, sharing.unshare_workspace, "{ws} is no longer shared with {user}."
    )
