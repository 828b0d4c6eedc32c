"""Pieces the apps' admin consoles share."""

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpResponseRedirect

from core.errors import ServiceError


class ServiceAdmin(admin.ModelAdmin):
    """A model admin whose saves call services. A refusal (`ServiceError`: forbidden, invalid,
    over capacity) is shown as a message on the same page, never a 500; the admin's own
    transaction rolls back, so nothing is half-written."""

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ServiceError as exc:
            self.message_user(request, f"Refused: {exc.detail}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def changelist_view(self, request, extra_context=None):
        try:
            return super().changelist_view(request, extra_context)
        except ServiceError as exc:  # a list_editable save
            self.message_user(request, f"Refused: {exc.detail}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())


class ReadOnlyMixin:
    """Shown, never added, changed or deleted here (for a model admin or an inline)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """For what the portal records (audit, runs, inventory, usage): shown, never edited here."""


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
