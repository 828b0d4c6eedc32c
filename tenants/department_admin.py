"""The admin of departments: every save goes through the department services (checked, audited,
reconciled). Quotas, envelopes and teams are shown here and set by API or on the pages'
services (`tenants.services.departments`), which check them against what the teams hold."""

from __future__ import annotations

from django.contrib import admin

from core.admin import ReadOnlyMixin, ServiceAdmin
from tenants.models import Department, DepartmentEnvelope, DepartmentQuota, Tenant
from tenants.services import departments as department_services


class QuotaInline(ReadOnlyMixin, admin.TabularInline):
    model = DepartmentQuota
    extra = 0
    fields = readonly_fields = ("gpu_model", "slices", "lending_limit", "borrowing_limit")
    can_delete = False
    verbose_name_plural = "quota in GPU slices (set by API: POST /api/v1/departments/<slug>/quota/)"


class EnvelopeInline(ReadOnlyMixin, admin.TabularInline):
    model = DepartmentEnvelope
    extra = 0
    fields = readonly_fields = ("resource_class", "max_amount", "max_duration_hours")
    can_delete = False


class TeamInline(ReadOnlyMixin, admin.TabularInline):
    model = Tenant
    fk_name = "department"
    extra = 0
    fields = readonly_fields = ("slug", "name", "status")
    can_delete = False
    verbose_name_plural = "teams (set by API: POST /api/v1/departments/<slug>/add-team/)"


@admin.register(Department)
class DepartmentAdmin(ServiceAdmin):
    list_display = ["slug", "name", "cost_centre", "monthly_budget", "auto_approve"]
    search_fields = ["slug", "name"]
    filter_horizontal = ["admins"]
    inlines = [QuotaInline, EnvelopeInline, TeamInline]
    fields = ["slug", "name", "cost_centre", "monthly_budget", "auto_approve", "admins"]

    def get_readonly_fields(self, request, obj=None):
        return ["slug"] if obj else []

    def save_model(self, request, obj, form, change):
        fields = {k: form.cleaned_data[k] for k in department_services.EDITABLE}
        if change:
            department_services.update_department(actor=request.user, department=obj, **fields)
        else:
            created = department_services.create_department(
                actor=request.user, slug=obj.slug, **fields
            )
            obj.pk = created.pk

    def save_related(self, request, form, formsets, change):
        for formset in formsets:  # read-only inlines: nothing to write, but the log reads them
            self.save_formset(request, form, formset, change=change)
        department = Department.objects.get(pk=form.instance.pk)
        department_services.set_department_admins(
            actor=request.user,
            department=department,
            usernames=[u.get_username() for u in form.cleaned_data["admins"]],
        )

    def delete_model(self, request, obj):
        department_services.delete_department(actor=request.user, department=obj)

    def delete_queryset(self, request, queryset):
        for department in queryset:
            department_services.delete_department(actor=request.user, department=department)
