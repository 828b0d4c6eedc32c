"""What a column can store, as pure checks: digits of a DecimalField, NUL and length of text."""

from decimal import Decimal

import pytest

from core import bounds
from core.errors import InvalidInput
from metering.models import Budget
from tenants.models import CapacityRequest, Tenant

AMOUNT = Budget._meta.get_field("amount")  # max_digits 12, decimal_places 2


@pytest.mark.parametrize(
    ("value", "stored"),
    [("0", "0.00"), ("9999999999.99", "9999999999.99"), ("1.005", "1.00"), ("2.675", "2.68")],
)
def test_a_decimal_that_fits_is_rounded_to_the_columns_places(value, stored):
    assert bounds.decimal_for(Decimal(value), AMOUNT, "amount") == Decimal(stored)


@pytest.mark.parametrize("value", ["10000000000", "1e12", "1e308", "9999999999.996", "Infinity"])
def test_a_decimal_the_column_cannot_hold_is_refused_with_the_limit(value):
    with pytest.raises(InvalidInput, match="amount must be less than 10,000,000,000"):
        bounds.decimal_for(Decimal(value), AMOUNT, "amount")


def test_text_with_a_nul_or_a_lone_surrogate_or_too_long_is_refused():
    text = CapacityRequest._meta.get_field("justification")
    assert bounds.text_for("fine", text, "justification") == "fine"
    for bad in ("a\x00b", "a\ud800b"):
        with pytest.raises(InvalidInput, match="NUL character"):
            bounds.text_for(bad, text, "justification")
    name = Tenant._meta.get_field("name")
    with pytest.raises(InvalidInput, match=f"at most {name.max_length} characters"):
        bounds.text_for("x" * (name.max_length + 1), name, "name")
