"""Notification settings and the delivery log in the browser: a team's page (members see it,
owners add, test and remove channels) and the platform team's (platform admins; every
delivery of every team). Each view parses input and calls one service."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from core import sealing
from core.errors import ServiceError
from core.permissions import is_platform_admin, platform_admin_required
from tenants import permissions
from tenants.forms import ChannelForm
from tenants.models import NotificationChannel, NotificationDelivery, Tenant
from tenants.notifications import EVENTS
from tenants.services import channels as channel_services

LOG_LENGTH = 100
# A new webhook's signing secret, between the POST that made it and the page it redirects to
# (which pops it: a reload shows the page without it and cannot post the form again); sealed
# and worthless after NEW_SECRET_DISPLAY_S, never in plain text in the session store.
NEW_SECRET_SESSION_KEY = "new_channel_secret"
NEW_SECRET_DISPLAY_S = 120


def _new_secret(request, page: str) -> str | None:
    held = request.session.pop(NEW_SECRET_SESSION_KEY, None)
    if not isinstance(held, dict) or held.get("page") != page:
        return None
    return sealing.unseal(
        held.get("sealed"), purpose=NEW_SECRET_SESSION_KEY, max_age_s=NEW_SECRET_DISPLAY_S
    )


def _page(
    request,
    tenant: Tenant | None,
    *,
    secret: str | None = None,
    status: int = 200,
    form: ChannelForm | None = None,
    editing: dict | None = None,
):
    channels = [  # each with what its events mean, not their ids
        (c, [EVENTS[n].description if n in EVENTS else n for n in c.events])
        for c in NotificationChannel.objects.filter(tenant=tenant, active=True).order_by(
            "name", "id"
        )
    ]
    deliveries = NotificationDelivery.objects.select_related("channel", "tenant")
    if tenant is not None:
        deliveries = deliveries.filter(tenant=tenant).team_side()
    state = request.GET.get("state", "")
    if state in NotificationDelivery.State.values:
        deliveries = deliveries.filter(state=state)
    may_manage = (
        is_platform_admin(request.user)
        if tenant is None
        else permissions.can_manage_members(request.user, tenant)
    )
    return render(
        request,
        "tenants/notifications.html",
        {
            "tenant": tenant,
            "channels": channels,
            "deliveries": deliveries[:LOG_LENGTH],
            "state": state,
            "states": NotificationDelivery.State.choices,
            "events": sorted(EVENTS.values(), key=lambda e: e.name),
            "may_manage": may_manage,
            "secret": secret,
            "form": form or ChannelForm(),
            # a refused edit: its row's form open again, with what was typed and why
            "editing": editing or {},
        },
        status=status,
    )


def _add(request, tenant: Tenant | None, back: str):
    form = ChannelForm(request.POST)
    if not form.is_valid():  # a kind or an event that is not offered: a tampered form
        return _page(request, tenant, status=400, form=form)
    try:
        channel, secret = channel_services.create_channel(
            actor=request.user, tenant=tenant, **form.cleaned_data
        )
    except ServiceError as exc:
        if exc.status == 403:  # the form is not shown to who may not add: say it on top
            messages.error(request, exc.detail)
        field = exc.field if exc.field in form.fields else None
        form.add_error(field, exc.detail[:1].upper() + exc.detail[1:])
        return _page(request, tenant, status=exc.status, form=form)
    messages.success(request, f"Channel {channel.name} added.")
    if secret:  # shown on the next page only, never stored in plain text nor shown again
        sealed = sealing.seal(secret, purpose=NEW_SECRET_SESSION_KEY)
        request.session[NEW_SECRET_SESSION_KEY] = {"page": back, "sealed": sealed}
    return redirect(back)


@login_required
@never_cache  # it may show a new secret: kept by no cache, nor the back button
@require_http_methods(["GET", "POST"])
def team_notifications(request, slug):
    tenant = get_object_or_404(Tenant.objects.visible_to(request.user), slug=slug)
    here = reverse("tenants:team_notifications", args=[slug])
    if request.method == "POST":
        return _add(request, tenant, here)
    return _page(request, tenant, secret=_new_secret(request, here))


@platform_admin_required
@never_cache
@require_http_methods(["GET", "POST"])
def platform_notifications(request):
    here = reverse("tenants:platform_notifications")
    if request.method == "POST":
        return _add(request, None, here)
    return _page(request, None, secret=_new_secret(request, here))


def _channel(request, pk) -> NotificationChannel:
    return get_object_or_404(
        NotificationChannel.objects.visible_to(request.user)
        .filter(active=True)
        .select_related("tenant"),
        pk=pk,
    )


def _back(channel: NotificationChannel) -> str:
    if channel.tenant is None:
        return reverse("tenants:platform_notifications")
    return reverse("tenants:team_notifications", args=[channel.tenant.slug])


@login_required
@require_POST
def channel_test(request, pk):
    channel = _channel(request, pk)
    try:
        channel_services.send_test_message(actor=request.user, channel=channel)
        messages.success(request, f"A test message to {channel.name} is on its way.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect(_back(channel))


@login_required
@require_POST
def channel_edit(request, pk):
    """A channel's name and events, from its row's form (the target stays: a new receiver is a
    new channel, or the API's PATCH)."""
    channel = _channel(request, pk)
    name, events = request.POST.get("name", channel.name), request.POST.getlist("events")
    try:
        saved = channel_services.change_channel(
            actor=request.user, channel=channel, name=name, events=events
        )
    except ServiceError as exc:
        if exc.status == 403:
            messages.error(request, exc.detail)
            return redirect(_back(channel))
        detail = exc.detail[:1].upper() + exc.detail[1:]
        edited = {"pk": channel.pk, "name": name, "events": events, "error": detail}
        return _page(request, channel.tenant, status=exc.status, editing=edited)
    messages.success(request, f"Channel {saved.name} saved.")
    return redirect(_back(channel))


@login_required
@require_POST
def channel_remove(request, pk):
    channel = _channel(request, pk)
    back = _back(channel)
    try:
        channel_services.remove_channel(actor=request.user, channel=channel)
        messages.success(request, f"Channel {channel.name} removed.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect(back)
