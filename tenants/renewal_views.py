"""The browser's "extend this grant": a form on the grant, one service call, then the renewal's
page (approved at once inside the envelope, otherwise waiting for the platform team)."""

from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from core.errors import ServiceError
from tenants import permissions
from tenants.forms import GrantExtendForm
from tenants.models import QuotaGrant
from tenants.services import capacity
from tenants.services import renewals as renewal_services


@login_required
@require_http_methods(["GET", "POST"])
def grant_extend(request, pk):
    grant = get_object_or_404(
        QuotaGrant.objects.visible_to(request.user).select_related("tenant", "resource_class"),
        pk=pk,
    )
    may_extend = permissions.can_ask(request.user, grant.tenant)
    status = 200
    latest = capacity.latest_end(grant.resource_class, timezone.now())
    form = GrantExtendForm(request.POST or None, latest=latest)
    if request.method == "POST" and not form.is_valid():
        status = 400  # what was typed stays, the error sits at its field
    elif request.method == "POST":  # the service says who may, and what is wrong
        try:
            renewal = renewal_services.submit_grant_renewal(
                actor=request.user,
                grant=grant,
                ends_at=form.cleaned_data["ends_at"],
                justification=form.cleaned_data["justification"],
            )
        except ServiceError as exc:
            field = exc.field if exc.field in form.fields else None
            form.add_error(field, exc.detail[:1].upper() + exc.detail[1:])
            status = exc.status
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
        if suggested_end is not None and latest is not None:  # never one the form refuses
            suggested_end = min(suggested_end, latest.replace(second=0, microsecond=0))
        if may_extend and suggested_end is not None:
            decision = renewal_services.renewal_decision(grant, suggested_end, timezone.now())
        if suggested_end is not None and not form.is_bound:
            form.initial["ends_at"] = timezone.localtime(suggested_end)
    return render(
        request,
        "tenants/grant_extend.html",
        {
            "grant": grant,
            "may_extend": may_extend,
            "form": form,
            "suggested_end": suggested_end,
            "decision": decision,
            "renewals": grant.renewals.order_by("-created_at")[:10],
        },
        status=status,
    )
