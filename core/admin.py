"""Pieces the apps' admin consoles share."""

from django.contrib import admin, messages
from django.contrib.admin.widgets import AutocompleteSelect
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpResponseRedirect

from core.errors import ServiceError


class KeyedAutocompleteSelect(AutocompleteSelect):
    """Django's autocomplete shows a refused form's choice by looking it up as a key: a typed
    'abc' for an integer key raised ValueError there (a 500, not the form's "select a valid
    choice"). A value that cannot be a key is left out of the lookup; the form says why."""

    def optgroups(self, name, value, attr=None):
        target = self.field.target_field
        keys = []
        for v in value:
            try:
                target.to_python(v)
            except ValidationError:
                continue
            keys.append(v)
        return super().optgroups(name, keys, attr)


class ServiceAdmin(admin.ModelAdmin):
    """A model admin whose saves call services. A refusal (`ServiceError`: forbidden, invalid,
    over capacity) is shown as a message on the same page, never a 500; the admin's own
    transaction rolls back, so nothing is half-written."""

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if "widget" not in kwargs and db_field.name in self.get_autocomplete_fields(request):
            kwargs["widget"] = KeyedAutocompleteSelect(
                db_field, self.admin_site, using=kwargs.get("using")
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

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
