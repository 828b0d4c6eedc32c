"""What every admin command shares: `--output`, the API's refusals on stderr (exit 5, with a
hint on a 403 about the admin scope), and values that may be `none` (a JSON null)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import click

from cli.client import ApiError
from cli.output import ADMIN_HINT, EXIT_API, OUTPUTS, fail, output_option


class NotFound(click.ClickException):
    """What the CLI looked for in the API's answers is not there (exit 5, as the API's 404)."""

    exit_code = EXIT_API


def api_errors(f: Callable, hint: str | None = ADMIN_HINT) -> Callable:
    """Run the command; an ApiError is printed (code, detail, field messages, and `hint` on a
    403) and exits 5."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except ApiError as exc:
            fail(exc, hint=hint)

    return wrapper


def admin_command(
    group: click.Group | None,
    name: str | None = None,
    *,
    outputs: Sequence[str] = OUTPUTS,
    fallback: str = "table",
    hint: str | None = ADMIN_HINT,
):
    """A command (of `group`, or on its own with None) that takes the context, `--output`, and
    turns the API's refusals into their messages on stderr and a non-zero exit (a team's
    commands pass `hint=None`: the admin token hint is not theirs)."""

    def decorate(f: Callable) -> click.Command:
        f = api_errors(f, hint)
        f = click.pass_context(f)
        f = output_option(outputs, fallback)(f)
        return (group.command if group is not None else click.command)(name)(f)

    return decorate


class _Null:
    """`none` on the command line: the field is set to null (no limit, no budget)."""

    def __repr__(self) -> str:
        return "none"


NULL = _Null()


class Nullable(click.ParamType):
    """A number, or `none` for a JSON null."""

    def __init__(self, inner: click.ParamType):
        self.inner = inner
        self.name = f"{inner.name} or none"

    def convert(self, value, param, ctx):
        if value is NULL or (isinstance(value, str) and value.lower() in ("none", "null")):
            return NULL
        return self.inner.convert(value, param, ctx)


def body_of(**fields: Any) -> dict:
    """The fields given on the command line (None or no values: not given; NULL: null)."""
    body = {}
    for key, value in fields.items():
        if value is None or value == ():
            continue
        body[key] = None if value is NULL else list(value) if isinstance(value, tuple) else value
    return body


def require_some(body: dict, options: str) -> None:
    if not body:
        raise click.UsageError(f"nothing to set: give one or more of {options}")
