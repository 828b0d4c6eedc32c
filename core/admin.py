"""Pieces the apps' admin consoles share."""

from django.contrib import admin, messages
from django.db.models import QuerySet

from core.errors import ServiceError


class ReadOnlyAdmin(admin.ModelAdmin):
    """For what the portal records (audit, runs, inventory, usage): shown, never edited here."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def run_each(modeladmin, request, queryset: QuerySet, verb: str, call) -> None:
    """An admin action calling a service per object: counts what worked, says what was refused."""
    done, failed = 0, []
    for obj in queryset:
        try:
            call(obj)
            done += 1
        except ServiceError as exc:
            failed.append(f"#{obj.pk}: {exc.detail}")
    if done:
        modeladmin.message_user(request, f"{verb} {done}.", messages.SUCCESS)
    for line in failed:
        modeladmin.message_user(request, line, messages.ERROR)
