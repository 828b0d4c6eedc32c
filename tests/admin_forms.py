"""Posting an admin change form as a browser would: what the page shows, sent back."""

from __future__ import annotations


def change_form_data(response) -> dict:
    """The POST data of an admin change page as rendered (its form's values and every inline's
    management form), for a test to edit and send back."""
    data: dict = {}
    form = response.context["adminform"].form
    for name in form.fields:
        value = form[name].value()
        if value is None or value is False:
            continue
        data[name] = "on" if value is True else value
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        for key, value in formset.management_form.initial.items():
            data[f"{formset.prefix}-{key}"] = value
        for i, inline_form in enumerate(formset.initial_forms):
            data[f"{formset.prefix}-{i}-{formset.model._meta.pk.name}"] = inline_form.instance.pk
    return data
