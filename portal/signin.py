"""Sign-in lockout (django-axes, configured in settings): whose address an attempt comes from
behind the portal's proxies, which attempts count, and what a locked-out person is told."""

from __future__ import annotations

from datetime import timedelta

from axes.helpers import get_client_username, get_cool_off
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.forms.utils import ErrorList
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def client_ip(request: HttpRequest) -> str | None:
    """The address that sent the request. Each of the TRUSTED_PROXY_COUNT proxies appends its
    peer to X-Forwarded-For, so the client is that many entries from the right; whatever a
    client writes into the header itself stays further left and is ignored."""
    count = settings.TRUSTED_PROXY_COUNT
    if count > 0:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        if len(hops) >= count:
            return hops[-count]
    return request.META.get("REMOTE_ADDR")


def not_a_password_sign_in(request: HttpRequest, credentials: dict | None) -> bool:
    """Single sign-on attempts carry no username: the provider checks the password, so there is
    nothing to guess here, and counting them by address would lock out a whole office."""
    return not get_client_username(request, credentials)


def _duration(delta: timedelta | None) -> str:
    seconds = int(delta.total_seconds()) if delta else 0
    if seconds >= 120:
        return f"{seconds // 60} minutes"
    return f"{seconds} seconds"


class _LockedOutForm(AuthenticationForm):
    """The sign-in form again, with the lockout as its error (the password is not checked)."""

    def __init__(self, request: HttpRequest, message: str, username: str) -> None:
        super().__init__(request, initial={"username": username})
        self.message = message

    def non_field_errors(self) -> ErrorList:
        return ErrorList([self.message])


def locked_out(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict | None = None,
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: the sign-in page, 429, saying why and for how long."""
    username = get_client_username(request, credentials) or ""
    message = (
        f"Too many failed sign-ins for {username!r} from your address: signing in is locked "
        f"for {_duration(get_cool_off(request))}, and each new attempt starts the wait again. "
        "Wait and try again, or ask a platform admin to unlock the account."
    )
    context = {
        "form": _LockedOutForm(request, message, username),
        "next": request.POST.get("next", request.GET.get("next", "")),
    }
    return render(request, "registration/login.html", context, status=429)
