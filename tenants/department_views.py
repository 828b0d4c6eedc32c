"""Department pages: the list (every department for the platform team, one's own for others)
and a department's page (its teams, its quota and what they hold, its admins, budget, envelope
and the asks waiting for its admins, who approve or reject them there)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.errors import ServiceError
from core.permissions import is_platform_admin
from tenants.models import CapacityRequest, Department
from tenants.services import approvals as approval_services
from tenants.services import departments as department_services
from tenants.services import requests as request_services


def _department(request, slug: str) -> Department:
    return get_object_or_404(Department.objects.visible_to(request.user), slug=slug)


@login_required
def department_list(request):
    departments = Department.objects.visible_to(request.user).prefetch_related("teams", "quotas")
    rows = [
        {
            "department": d,
            "teams": len(d.teams.all()),
            "quota": department_services.department_use(d),
        }
        for d in departments
    ]
    return render(request, "tenants/department_list.html", {"rows": rows})


@login_required
def department_detail(request, slug):
    department = _department(request, slug)
    deciding = is_platform_admin(request.user) or department_services.is_department_admin(
        request.user, department
    )
    waiting = (
        CapacityRequest.objects.filter(
            tenant__department=department, state=CapacityRequest.State.SUBMITTED
        )
        .select_related("tenant", "requester")
        .prefetch_related("items__resource_class")
        .order_by("created_at")
        if deciding
        else CapacityRequest.objects.none()
    )
    context = {
        "department": department,
        "teams": department.teams.order_by("slug"),
        "quota": department_services.department_use(department),
        "admins": sorted(u.get_username() for u in department.admins.all()),
        "envelopes": department.envelopes.select_related("resource_class").order_by(
            "resource_class__slug"
        ),
        "waiting": waiting,
        "deciding": deciding,
    }
    return render(request, "tenants/department_detail.html", context)


@login_required
@require_POST
def department_decide(request, slug):
    """Approve or reject one of its teams' asks (a department admin within its quota)."""
    department = _department(request, slug)
    asked = request.POST.get("request", "")
    if not asked.isdigit():
        raise Http404("no such request")
    ask = get_object_or_404(
        CapacityRequest.objects.filter(tenant__department=department), pk=int(asked)
    )
    comment = request.POST.get("comment", "")
    try:
        if request.POST.get("decision") == "approve":
            approval_services.approve_capacity_request(
                actor=request.user, request=ask, comment=comment
            )
            messages.success(request, f"Request #{ask.pk} approved.")
        else:
            request_services.reject_capacity_request(
                actor=request.user, request=ask, comment=comment
            )
            messages.success(request, f"Request #{ask.pk} rejected.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect("tenants:department_detail", slug=department.slug)
