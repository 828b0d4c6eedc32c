"""The one unit in templates (issue 49, 4): numbers of compute slices said as the pages say
them elsewhere, by `catalog.slices`."""

from django import template

from catalog import slices

register = template.Library()


@register.filter
def slices_of(count: int, total: int | None = None) -> str:
    """`{{ used|slices_of:nominal }}` -> `3 of 12 slices`; `{{ n|slices_of }}` -> `3 slices`."""
    return slices.slices_of(int(count or 0), None if total in (None, "") else int(total))
