"""Kubernetes resource quantities ("500m", "8", "64Gi", "1.5G", "1e3") read as exact numbers.

Pure: the workload checks, the settings checks and the manifests share one reading, so what the
portal accepts is what the API server accepts, compared by value ("1Gi" > "1G")."""

from __future__ import annotations

import re
from decimal import Decimal

# The API server's grammar without a sign (a negative amount is never an ask) and with a short
# exponent (1e999999 would overflow Decimal; nobody means it).
_QUANTITY = re.compile(
    r"^(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]{1,3}|[numkMGTPE])?$"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
MAX_LENGTH = 32


class BadQuantity(ValueError):
    """Not a Kubernetes quantity (the message says why, without the input)."""


def parse_quantity(text: str) -> Decimal:
    """The exact value of a quantity: "500m" -> 0.5, "64Gi" -> 68719476736. Raises BadQuantity."""
    if not isinstance(text, str) or not text or len(text) > MAX_LENGTH:
        raise BadQuantity(f"a quantity is a number and a unit, at most {MAX_LENGTH} characters")
    if text.startswith("-"):
        raise BadQuantity("a quantity must not be negative")
    match = _QUANTITY.match(text)
    if match is None:
        raise BadQuantity(
            "a quantity is a number with an optional unit: m (thousandths), k, M, G, T, "
            "Ki, Mi, Gi, Ti, ... (e.g. 500m, 8, 64Gi)"
        )
    number, suffix = Decimal(match["number"]), match["suffix"] or ""
    if suffix in _BINARY:
        return number * (Decimal(1024) ** _BINARY[suffix])
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number.scaleb(int(suffix[1:]))
    return number.scaleb(_DECIMAL[suffix])
