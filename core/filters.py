"""FilterSet filters for date-times: the value is brought to UTC while the form is cleaned, so
PostgreSQL, which takes offsets up to ±15:59 only (ISO 8601 allows `+19:48`: that was a 500),
always gets UTC, and a date-time that leaves the calendar once in UTC (`0001-01-01T00:00+05:00`,
`9999-12-31T23:00-05:00`) is a form error that says so instead of a 500."""

from datetime import UTC, datetime

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django_filters.fields import IsoDateTimeField

OUT_OF_RANGE = "This date and time is out of range: enter one from year 0001 to 9999 in UTC."


def to_utc(value):
    if isinstance(value, datetime) and value.tzinfo is not None:
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValidationError(OUT_OF_RANGE, code="out_of_range") from None
    return value


class UTCDateTimeField(forms.DateTimeField):
    def to_python(self, value):
        return to_utc(super().to_python(value))


class UTCIsoDateTimeField(IsoDateTimeField):
    def to_python(self, value):
        return to_utc(super().to_python(value))


class UTCDateTimeFilter(django_filters.DateTimeFilter):
    field_class = UTCDateTimeField


class UTCIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UTCIsoDateTimeField
