"""Racing real transactions against each other on PostgreSQL (tests marked transaction=True)."""

from __future__ import annotations

import threading
import time

from django.db import connection


def race(targets):
    """Run each callable in its own thread and connection, all released at once; returns each
    one's result or the exception it raised, in order."""
    barrier = threading.Barrier(len(targets))
    results: list = [None] * len(targets)

    def run(i, fn):
        try:
            barrier.wait(timeout=30)
            results[i] = fn()
        except Exception as exc:  # noqa: BLE001 - the outcome is what we assert on
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a racer hung"
    return results


def wait_until_another_waits_for_a_lock(timeout: float = 30) -> None:
    """Return once another session of this database is blocked on a lock (PostgreSQL says so in
    pg_stat_activity): a barrier on what the database does, not a sleep that may be too short
    on a loaded machine."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while True:
            # pg_stat_activity is read once per transaction unless its snapshot is dropped
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0]:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"no session waited for a lock within {timeout} s")
            time.sleep(0.02)
