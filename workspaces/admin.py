"""Workspaces in Django's admin: each team's workspace policy (written through the services,
audited) and the workspaces themselves, read-only."""

from django.contrib import admin

from core.admin import ReadOnlyAdmin, ServiceAdmin
from workspaces import services
from workspaces.models import Workspace, WorkspacePolicy


@admin.register(WorkspacePolicy)
class WorkspacePolicyAdmin(ServiceAdmin):
    list_display = ("tenant", "max_per_person", "idle_after_s")

    def save_model(self, request, obj, form, change):
        saved = services.set_workspace_policy(
            actor=request.user,
            tenant=obj.tenant,
            max_per_person=obj.max_per_person,
            idle_after_s=obj.idle_after_s,
        )
        obj.pk = saved.pk

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Workspace)
class WorkspaceAdmin(ReadOnlyAdmin):
    list_display = ("name", "tenant", "owner", "kind", "resource_class", "runs", "created_at")
