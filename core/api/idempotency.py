"""`Idempotency-Key` on creating POSTs: the same key and body replays the first answer; the same
key with another body is a 409. Records live in PostgreSQL, written in the same transaction as
what the call created; calls with one key take turns on an advisory lock, so a retry racing the
first call waits for it and then replays it.

A secret in an answer (an API token's) is never stored: the record keeps the answer without it,
and a retry is answered `409 secret_shown_once` with what was created, never the secret again.
Records older than `IDEMPOTENCY_KEY_TTL_HOURS` replay nothing and are deleted by the beat task
`core.tasks.purge_idempotency_records`."""

from __future__ import annotations

import functools
import hashlib
import json
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from core.errors import InvalidInput, ServiceError
from core.models import IdempotencyRecord

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"

IDEMPOTENCY_PARAMETER = OpenApiParameter(
    name=HEADER,
    location=OpenApiParameter.HEADER,
    required=False,
    description="Any unique string (≤200 chars). A retry with the same key and body gets the "
    "first answer again; the same key with another body is refused with 409 "
    "`idempotency_key_reused`. An answer with a secret (a new API token) is not kept: its "
    "retry is 409 `secret_shown_once`, naming what the first call created.",
)


class IdempotencyKeyReused(ServiceError):
    code = "idempotency_key_reused"
    status = 409


def body_hash(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _replay(
    record: IdempotencyRecord, digest: str, method: str, path: str, secret_fields: tuple
) -> Response:
    if record.body_hash != digest or record.path != path or record.method != method:
        raise IdempotencyKeyReused(
            f"the Idempotency-Key {record.key!r} was used for another request "
            f"({record.method} {record.path} with another body); use a new key"
        )
    headers = {REPLAYED_HEADER: "true"}
    stored = record.response_body if isinstance(record.response_body, dict) else {}
    withheld = [name for name in secret_fields if name not in stored]
    if withheld:
        # The first answer held a secret that was not kept: say what was created instead of
        # answering as if it had been (a client would take the answer for a usable one). An
        # answer whose secret field was empty (an e-mail channel has none) replays as it was.
        created = stored.get("id")
        return Response(
            {
                "code": "secret_shown_once",
                "detail": f"the first call with the Idempotency-Key {record.key!r} created "
                f"id {created}; its {' and '.join(withheld)} was in that answer only and "
                "is not kept, so it cannot be sent again. If that answer was lost, revoke "
                f"id {created} and create another with a new Idempotency-Key",
                "errors": {},
            },
            status=409,
            headers=headers,
        )
    return Response(record.response_body, status=record.status_code, headers=headers)


def _without(data, secret_fields: tuple):
    """The answer as it is stored: JSON, less its secrets (a field left empty stays, so its
    replay can be the answer itself)."""
    body = json.loads(JSONRenderer().render(data) or b"null")
    if isinstance(body, dict):
        for name in secret_fields:
            if body.get(name) not in (None, ""):
                body.pop(name)
    return body


def purge_expired_records(now=None) -> int:
    """Delete the records older than the TTL (they replay nothing any more); the count."""
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.IDEMPOTENCY_KEY_TTL_HOURS)
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted


def _lock_key(user_id: int, key: str) -> None:
    """A transaction-scoped PostgreSQL advisory lock on (user, key)."""
    digest = hashlib.sha256(f"idempotency:{user_id}:{key}".encode()).digest()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s)", [int.from_bytes(digest[:8], "big", signed=True)]
        )


def idempotent(method=None, *, secret_fields: tuple[str, ...] = ()):
    """Decorate a viewset's creating method (create or a POST action). `secret_fields`: the
    answer's top-level fields that are secrets, never stored nor replayed."""
    if method is None:
        return functools.partial(idempotent, secret_fields=tuple(secret_fields))

    @functools.wraps(method)
    def wrapper(self, request, *args, **kwargs):
        key = request.headers.get(HEADER, "").strip()
        if not key:
            return method(self, request, *args, **kwargs)
        if len(key) > 200:
            raise InvalidInput("the Idempotency-Key may be at most 200 characters")
        if "\x00" in key:  # PostgreSQL refuses NUL in text: it would be a 500 at the lookup
            raise InvalidInput("the Idempotency-Key has a NUL character (\\x00); remove it")
        digest = body_hash(request.data)
        user = request.user
        fresh_after = timezone.now() - timedelta(hours=settings.IDEMPOTENCY_KEY_TTL_HOURS)
        try:
            with transaction.atomic():
                # Calls with one key take turns: a second one waits here until the first has
                # committed (or failed), then finds its record and replays it, instead of
                # running the call again and meeting what the first one created. The record
                # is looked for only under the lock: a first call with its key (the usual
                # case) pays one look, not one before the lock and one after.
                _lock_key(user.pk, key)
                existing = IdempotencyRecord.objects.filter(user=user, key=key).first()
                if existing is not None and existing.created_at >= fresh_after:
                    return _replay(existing, digest, request.method, request.path, secret_fields)
                if existing is not None:  # stale: its key may be used again
                    IdempotencyRecord.objects.filter(pk=existing.pk).delete()
                response = method(self, request, *args, **kwargs)
                if 200 <= response.status_code < 300:
                    IdempotencyRecord.objects.create(
                        user=user,
                        key=key,
                        method=request.method,
                        path=request.path,
                        body_hash=digest,
                        status_code=response.status_code,
                        response_body=_without(response.data, secret_fields),
                    )
        except IntegrityError:
            # A concurrent call with the same key won the race: answer as it did.
            winner = IdempotencyRecord.objects.filter(user=user, key=key).first()
            if winner is None:
                raise
            return _replay(winner, digest, request.method, request.path, secret_fields)
        return response

    return wrapper
