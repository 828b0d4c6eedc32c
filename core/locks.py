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


def advisory_lock_held_elsewhere(space: int, key: int) -> bool:
    """Whether another session holds the advisory lock `(space, key)` now (read from
    `pg_locks`, without taking it). A session dies with its process: a worker killed with
    SIGKILL drops its TCP connection and PostgreSQL ends the session and its locks at once,
    so "held elsewhere" is "its holder is alive"."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 2"
            " AND pid <> pg_backend_pid())",
            [space, key],
        )
        (held,) = cursor.fetchone()
    return bool(held)
