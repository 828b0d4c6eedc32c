"""How the CLI answers: exit codes, `--output json|table`, tables and records, and the API's
refusals on stderr. Pure: no HTTP here (tests in cli/tests/test_output.py)."""

from __future__ import annotations

import json
import sys
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Any, NoReturn

import click

from cli.client import ApiError

# Exit codes (docs/api.md, "The CLI"). 2 is click's: a usage error, refused before any call.
EXIT_OK = 0
EXIT_FAILED = 1  # the workload failed
EXIT_CANCELLED = 3  # the workload was cancelled (by someone, or stopped by a policy)
EXIT_TIMEOUT = 4  # `wait` gave up; the workload is NOT cancelled and keeps its course
EXIT_API = 5  # the API refused the call, or could not be reached: its message on stderr
EXIT_TIMEOUT_CANCELLED = 6  # `wait --cancel-on-timeout` gave up and cancelled the workload
EXIT = {"succeeded": EXIT_OK, "failed": EXIT_FAILED, "cancelled": EXIT_CANCELLED}

OUTPUTS = ("table", "json")

# What a 403 on an admin command most often means, said once after the API's own words.
ADMIN_HINT = (
    "hint: admin commands need a platform admin's token with the admin scope "
    "(manage.py issue_token USER --scopes admin, or the Tokens page)"
)


def output_option(choices: Sequence[str] = OUTPUTS, fallback: str = "table"):
    """`--output json|table`: `fallback` (a table) unless asked, or json with the group's
    `--json` flag."""
    return click.option(
        "--output",
        "-o",
        "output",
        type=click.Choice(list(choices)),
        default=None,
        help=f"default {fallback} (json with gpu-portal --json)",
    )


def resolve_output(ctx: click.Context, output: str | None, fallback: str = "table") -> str:
    if output:
        return output
    root = ctx.find_root().obj
    return "json" if getattr(root, "as_json", False) else fallback


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, default=str, ensure_ascii=False)


def emit(ctx: click.Context, output: str | None, data: Any, render: Callable[[], str]) -> None:
    """Print `data` as JSON, or as `render()`'s text (a table, a record, a line)."""
    if resolve_output(ctx, output) == "json":
        click.echo(to_json(data))
    else:
        text = render()
        if text:
            click.echo(text)


def fail(exc: ApiError, *, hint: str | None = None) -> NoReturn:
    """The API's refusal on stderr (its code, `detail` and each field's messages) and exit 5."""
    said = "\n".join(printable(line) for line in str(exc).splitlines())
    click.echo(f"error: {said}", err=True)
    if hint and exc.status == 403:
        click.echo(hint, err=True)
    sys.exit(EXIT_API)


# --- cells, tables and records -----------------------------------------------------------------


def cell(value: Any) -> str:
    """One value as a table shows it: `-` for nothing, lists joined, mappings as k=v."""
    if value is None or value == "" or value == [] or value == {}:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k}={cell(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return "; ".join(cell(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return printable(" ".join(str(value).split()))  # one line: blanks as one blank


def printable(text: str) -> str:
    """`text` with every control and format character written out (`\\x1b`, `\\u202e`): a
    justification or a name is another person's input, and an escape sequence or a bidi
    override in it would otherwise act on the terminal that prints the table."""
    return "".join(
        ch.encode("unicode_escape").decode("ascii")
        if unicodedata.category(ch) in ("Cc", "Cf")
        else ch
        for ch in text
    )


Column = tuple[str, str]  # (key, header); a key may be dotted: "queue.pending"


def pick(row: dict, key: str) -> Any:
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _numeric(values: Iterable[str]) -> bool:
    seen = False
    for v in values:
        if v == "-":
            continue
        try:
            Decimal(v)
        except ArithmeticError:
            return False
        seen = True
    return seen


def table(rows: Sequence[dict], columns: Sequence[Column], *, empty: str = "(none)") -> str:
    """Aligned columns under a header; numbers right-aligned, text left; `empty` for no rows."""
    if not rows:
        return empty
    cells = [[cell(pick(row, key)) for key, _ in columns] for row in rows]
    headers = [header for _, header in columns]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    right = [_numeric(r[i] for r in cells) for i in range(len(columns))]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in cells)])


def record(data: dict, fields: Sequence[Column] | None = None) -> str:
    """One object as `label: value` lines (all its scalar keys when `fields` is None)."""
    if fields is None:
        fields = [(k, k) for k, v in data.items() if not isinstance(v, list)]
    width = max((len(label) for _, label in fields), default=0)
    return "\n".join(f"{label + ':':<{width + 1}} {cell(pick(data, key))}" for key, label in fields)
