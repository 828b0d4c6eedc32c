"""PostgreSQL advisory locks: one run at a time across workers, without holding a row lock for
the seconds a run takes (it commits as it goes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def advisory_lock(space: int, key: int) -> Iterator[bool]:
    """A session-level `pg_try_advisory_lock(space, key)`; yields whether this run got it, and
    releases it at the end if it did."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [space, key])
        (acquired,) = cursor.fetchone()
    try:
        yield acquired
    finally:
        if acquired:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [space, key])
