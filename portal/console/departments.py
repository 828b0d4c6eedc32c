"""The console's "new department" form: a platform admin creates a department here, as the
admin site and the API can (issue 49, 9); the service checks and audits it. Its quota, envelope
and admins are set on the department's page and by API after."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render

from core.errors import ServiceError
from core.forms import RefuseNotCut
from core.permissions import platform_admin_required
from tenants.services import departments as department_services


class DepartmentForm(RefuseNotCut, forms.Form):
    name = forms.CharField(max_length=120, help_text="As people call it, e.g. “Research”")
    slug = forms.SlugField(
        max_length=40,
        help_text="Short name in addresses and the API: lower-case letters, digits and dashes",
    )
    cost_centre = forms.CharField(max_length=40, required=False)
    monthly_budget = forms.DecimalField(
        required=False,
        min_value=Decimal("0"),
        max_digits=12,
        decimal_places=2,
        help_text="Per month over all its teams; empty: none",
    )
    auto_approve = forms.BooleanField(
        required=False,
        initial=True,
        label="Approve its teams' small asks at once",
        help_text="Asks inside the auto-approval envelope; off: its admins decide every ask",
    )


@platform_admin_required
def department_create(request):
    form = DepartmentForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            department = department_services.create_department(
                actor=request.user,
                slug=data["slug"],
                name=data["name"],
                cost_centre=data["cost_centre"],
                monthly_budget=data["monthly_budget"],
                auto_approve=data["auto_approve"],
            )
        except ServiceError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.detail)
        else:
            messages.success(
                request,
                f"Department {department.name} created. Set its quota, admins and teams below.",
            )
            return redirect("tenants:department_detail", slug=department.slug)
    return render(request, "console/department_form.html", {"form": form})
