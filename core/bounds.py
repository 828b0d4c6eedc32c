"""What a column can store, checked before a service writes a user's value into it: a number
too large for a DecimalField's digits or a text with a NUL (PostgreSQL refuses both, as a
500) is a clear 400 instead, naming the field and what to change."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal

from core.errors import InvalidInput

# PostgreSQL's text holds neither NUL nor a lone surrogate (not valid UTF-8).
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(value: str) -> bool:
    """Whether a text column could hold `value` at all: a search for what none can hold finds
    nothing (and PostgreSQL refuses to be asked)."""
    return not UNSTORABLE.search(value)


def decimal_for(value: Decimal, column, field: str) -> Decimal:
    """`value` rounded to the column's decimal places, if its digits fit (`column`: a Django
    DecimalField, e.g. `Budget._meta.get_field("amount")`)."""
    whole_digits = column.max_digits - column.decimal_places
    limit = Decimal(10) ** whole_digits
    if not value.is_finite() or abs(value) >= limit:
        raise InvalidInput(f"{field} must be less than {limit:,.0f}", field=field)
    step = Decimal(1).scaleb(-column.decimal_places)
    rounded = value.quantize(step, rounding=ROUND_HALF_EVEN)
    if abs(rounded) >= limit:  # 999…9.995 rounds up past the limit
        raise InvalidInput(f"{field} must be less than {limit:,.0f}", field=field)
    return rounded


def text_for(value: str, column, field: str) -> str:
    """`value` if the column can store it: no NUL or lone surrogate, within its max_length."""
    if UNSTORABLE.search(value):
        raise InvalidInput(
            f"{field} has a NUL character (\\u0000) or a lone surrogate: remove it", field=field
        )
    limit = getattr(column, "max_length", None)
    if limit is not None and len(value) > limit:
        raise InvalidInput(f"{field} must be at most {limit} characters", field=field)
    return value
