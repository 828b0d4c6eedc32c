"""Racing real transactions against each other on PostgreSQL (tests marked transaction=True)."""

from __future__ import annotations

import threading

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
