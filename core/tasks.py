"""The one decorator for every Celery task of the portal (house style: Celery done carefully)."""

import logging

from celery import shared_task

from core.api.idempotency import purge_expired_records
from core.errors import TransientClusterError

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionError,
    TimeoutError,
    TransientClusterError,
)


log = logging.getLogger(__name__)


def send_hint(task, why: str, **kwargs) -> None:
    """Queue a task that only hastens what a periodic task does anyway (PostgreSQL holds the
    truth): if the broker cannot take it, log and carry on, so the request that made the change
    still succeeds. `why` says what waits for the periodic run."""
    try:
        task.apply_async(kwargs=kwargs)
    except Exception:  # noqa: BLE001 - any broker failure: the periodic task repairs it
        log.warning(
            "could not queue %s (%s waits for the periodic run)", task.name, why, exc_info=True
        )


def portal_task(*args, **kwargs):
    """`shared_task` with late acks, retry with backoff and jitter on transient errors, and time
    limits. Tasks take ids by keyword and must be safe to run twice."""
    options = {
        "acks_late": True,
        "reject_on_worker_lost": True,
        "autoretry_for": TRANSIENT_ERRORS,
        "retry_backoff": 2,
        "retry_backoff_max": 120,
        "retry_jitter": True,
        "max_retries": 8,
    }
    options.update(kwargs)
    return shared_task(*args, **options)


@portal_task(name="core.tasks.purge_idempotency_records")
def purge_idempotency_records() -> int:
    """Beat, hourly: delete Idempotency-Key records past IDEMPOTENCY_KEY_TTL_HOURS."""
    return purge_expired_records()
