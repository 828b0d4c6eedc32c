"""The browser's "extend this grant": a form on the grant, one service call, then the renewal's
page (approved at once inside the envelope, otherwise waiting for the platform team)."""

from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_http_methods

from core.errors import InvalidInput, ServiceError
from core.filters import OUT_OF_RANGE, to_utc
from tenants import permissions
from tenants.models import QuotaGrant
from tenants.services import renewals as renewal_services


def _parse_end(raw: str) -> datetime | None:
    """A datetime-local value (`2027-01-31T18:00`) in the portal's time zone, or None; in UTC,
    so an offset PostgreSQL refuses (beyond ±15:59) or a year past 9999 is an InvalidInput."""
    try:
        value = parse_datetime((raw or "").strip())
    except ValueError:
        return None
    if value is not None and timezone.is_naive(value):
        value = timezone.make_aware(value)
    try:
        return to_utc(value)
    except ValidationError:
        raise InvalidInput(OUT_OF_RANGE, field="ends_at") from None


@login_required
@require_http_methods(["GET", "POST"])
def grant_extend(request, pk):
    grant = get_object_or_404(
        QuotaGrant.objects.visible_to(request.user).select_related("tenant", "resource_class"),
        pk=pk,
    )
    may_extend = permissions.can_ask(request.user, grant.tenant)
    error, status = "", 200
    if request.method == "POST":  # the service says who may, and what is wrong
        try:
            ends_at = _parse_end(request.POST.get("ends_at", ""))
            renewal = renewal_services.submit_grant_renewal(
                actor=request.user,
                grant=grant,
                ends_at=ends_at,
                justification=request.POST.get("justification", ""),
            )
        except ServiceError as exc:
            error, status = exc.detail, exc.status
        else:
            if renewal.auto_approved:
                messages.success(request, f"Grant #{grant.pk} extended (inside the policy).")
            else:
                messages.success(
                    request, f"Renewal #{renewal.pk} is waiting for the platform team."
                )
            return redirect("tenants:request_detail", pk=renewal.pk)
    # The form offers an extension as long as the grant has run so far, with the policy's
    # answer to it (approved at once, or why a platform admin decides).
    suggested_end: datetime | None = None
    decision = None
    if grant.ends_at and grant.state == QuotaGrant.State.ACTIVE:
        try:
            suggested_end = grant.ends_at + (grant.ends_at - grant.starts_at)
        except OverflowError:  # a grant ending near year 9999: no end to suggest
            suggested_end = None
        if may_extend and suggested_end is not None:
            decision = renewal_services.renewal_decision(grant, suggested_end, timezone.now())
    return render(
        request,
        "tenants/grant_extend.html",
        {
            "grant": grant,
            "may_extend": may_extend,
            "error": error,
            "suggested_end": suggested_end,
            "decision": decision,
            "renewals": grant.renewals.order_by("-created_at")[:10],
        },
        status=status,
    )
