"""FilterSet base for the pages: date-times are brought to UTC before they reach PostgreSQL,
which takes offsets up to ±15:59 only (ISO 8601 allows `+19:48`: that was a 500)."""

from datetime import UTC, datetime

import django_filters


class UTCDateTimeFilter(django_filters.DateTimeFilter):
    def filter(self, qs, value):
        if isinstance(value, datetime) and value.tzinfo is not None:
            value = value.astimezone(UTC)
        return super().filter(qs, value)
