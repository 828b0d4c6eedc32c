"""The API's body parsers: DRF's, refusing up front what would otherwise end as a 500 further in.

- JSON nested deeper than `MAX_JSON_DEPTH`: Python's parser raises `RecursionError` (not a
  `ValueError`) at about a thousand levels, and anything that walks a body (hashing it for the
  Idempotency-Key, validating it) can meet the same limit below that. No body of this API is
  more than a few levels deep.
- Text PostgreSQL cannot hold, in a key or a value: NUL (U+0000) and lone surrogates (not
  UTF-8). Serializer fields refuse them in the values they know, but not in the keys of a dict
  (`items`, `resources`, `env`), which reach the database as they are.
"""

from __future__ import annotations

import re

from rest_framework import parsers
from rest_framework.exceptions import ParseError, ValidationError

MAX_JSON_DEPTH = 32
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _show(key) -> str:
    # A key may hold the very character refused: escape it rather than echo it.
    return str(key).encode("unicode_escape").decode("ascii")


def _where(path: list) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{_show(p)}" for p in path).lstrip(".")


def _refuse_unstorable_text(data) -> None:
    """Walk the parsed body (iteratively: it may be deep) and refuse the first string, key or
    value, that PostgreSQL could not store, naming the top-level field it is under."""
    stack: list[tuple[object, list]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            items = list(value.items())
        elif isinstance(value, list):
            items = list(enumerate(value))
        else:
            items = []
            if isinstance(value, str) and _UNSTORABLE.search(value):
                _refuse(path, "a value")
        if len(path) >= MAX_JSON_DEPTH and isinstance(value, dict | list):
            raise ParseError(
                f"the JSON body is nested more than {MAX_JSON_DEPTH} levels deep "
                f"(at {_where(path)}); send a flatter body"
            )
        for key, item in items:
            if isinstance(key, str) and _UNSTORABLE.search(key):
                _refuse([*path, key], "a key")
            stack.append((item, [*path, key]))


def _refuse(path: list, what: str) -> None:
    # The top-level field it is under (a form's `items.<key>` is the field `items`).
    field = _show(path[0]).split(".")[0] if path else "non_field_errors"
    raise ValidationError(
        {
            field: [
                f"{what} at {_where(path) or 'the top'} has a NUL character (\\u0000) or a lone "
                "surrogate, which cannot be stored; remove it"
            ]
        }
    )


class PortalJSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(
                f"JSON parse error - the body is nested more than {MAX_JSON_DEPTH} levels "
                "deep; send a flatter body"
            ) from None
        _refuse_unstorable_text(data)
        return data


class PortalFormParser(parsers.FormParser):
    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        _refuse_unstorable_text(dict(data.lists()))
        return data


class PortalMultiPartParser(parsers.MultiPartParser):
    def parse(self, stream, media_type=None, parser_context=None):
        parsed = super().parse(stream, media_type, parser_context)
        _refuse_unstorable_text(dict(parsed.data.lists()))
        return parsed
