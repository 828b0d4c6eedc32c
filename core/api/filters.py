"""The API's filter backend: django-filter's, with date-times brought to UTC before they reach
the database. PostgreSQL takes UTC offsets up to ±15:59 only; ISO 8601 allows more (`+19:48`),
and such a `?since=` used to be a 500 instead of a result."""

from __future__ import annotations

from datetime import UTC, datetime

from django_filters import utils
from django_filters.rest_framework import DjangoFilterBackend


class PortalFilterBackend(DjangoFilterBackend):
    def filter_queryset(self, request, queryset, view):
        filterset = self.get_filterset(request, queryset, view)
        if filterset is None:
            return queryset
        if not filterset.is_valid() and self.raise_exception:
            raise utils.translate_validation(filterset.errors)
        cleaned = filterset.form.cleaned_data
        for name, value in cleaned.items():
            if isinstance(value, datetime) and value.tzinfo is not None:
                cleaned[name] = value.astimezone(UTC)
        return filterset.qs
