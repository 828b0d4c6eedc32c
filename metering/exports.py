"""One shape for a statement, used by the page, the CSV/JSON export and the API."""

from __future__ import annotations

import csv
import io
import re
from datetime import date

from django.conf import settings

from metering import pricing
from tenants.models import Tenant

CSV_FIELDS = [
    "tenant",
    "cost_centre",
    "month",
    "basis",
    "currency",
    "mode",
    "resource_class",
    "name",
    "gpu_fraction",
    "allocated_hours",
    "allocated_gpu_hours",
    "allocated_cost",
    "quota_hours",
    "quota_gpu_hours",
    "quota_cost",
    "billed_cost",
    "observed_hours",
    "used_hours",
    "idle_hours",
    "idle_cost",
    "waived_hours",
    "waived_cost",
]
# Columns of numbers the portal computes; the others hold text, some of it typed by people.
NUMBER_FIELDS = frozenset(CSV_FIELDS[CSV_FIELDS.index("gpu_fraction") :])

# What a spreadsheet may read as the start of a formula (OWASP "CSV injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", re.ASCII)


def csv_cell(value, *, number: bool = False) -> str:
    """A cell a spreadsheet shows as written: text that could start a formula gets a leading
    single quote. In a number column a real number (-3.5) stays as it is, so it sums."""
    text = "" if value is None else str(value)
    if not text.startswith(_FORMULA_START) or (number and _NUMBER.fullmatch(text)):
        return text
    return "'" + text


def statement_dict(tenant: Tenant, month: date, statement: pricing.Statement, budget=None) -> dict:
    return {
        "tenant": tenant.slug,
        "cost_centre": tenant.cost_centre,
        "month": f"{month:%Y-%m}",
        "basis": statement.basis,
        "currency": settings.BILLING_CURRENCY,
        "mode": settings.BILLING_MODE,
        "window": {
            "start": statement.window.start.isoformat(),
            "end": statement.window.end.isoformat(),
        },
        "lines": [
            {
                "resource_class": line.slug,
                **{k: v for k, v in line.as_dict().items() if k != "slug"},
            }
            for line in statement.lines
        ],
        "totals": {
            "allocated_gpu_hours": str(statement.allocated_gpu_hours),
            "allocated_cost": str(statement.allocated_cost),
            "quota_cost": str(statement.quota_cost),
            "idle_hours": str(statement.idle_hours),
            "idle_cost": str(statement.idle_cost),
            "waived_cost": str(statement.waived_cost),
            "total": str(statement.total),
        },
        "budget": str(budget) if budget is not None else None,
    }


def statements_csv(rows: list[dict]) -> str:
    """Flat CSV of statement dicts: one line per tenant and resource class."""
    out = io.StringIO()
    # RFC 4180's CRLF: the csv module quotes a cell holding the line terminator's characters
    # only, so with "\n" alone a carriage return in a cell went out unquoted and split the row.
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\r\n")
    writer.writeheader()
    for st in rows:
        for line in st["lines"]:
            row = {
                "tenant": st["tenant"],
                "cost_centre": st["cost_centre"],
                "month": st["month"],
                "basis": st["basis"],
                "currency": st["currency"],
                "mode": st["mode"],
                **{k: line[k] for k in CSV_FIELDS[CSV_FIELDS.index("resource_class") :]},
            }
            writer.writerow({k: csv_cell(v, number=k in NUMBER_FIELDS) for k, v in row.items()})
    return out.getvalue()


def rows_csv(rows: list[dict], fields: list[str], numbers: frozenset[str]) -> str:
    """Flat CSV of dicts with the given columns (the roll-ups), cells made safe as above."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\r\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: csv_cell(row[k], number=k in numbers) for k in fields})
    return out.getvalue()
