"""Celery tasks of the notification layer (registered through `tenants.tasks`)."""

from core.tasks import portal_task
from tenants.notifications import sending


@portal_task(name="tenants.tasks.deliver_notification", bind=True, max_retries=None)
def deliver_notification(self, *, delivery_id: int) -> str | None:
    """Send one delivery; a transient failure comes back after its backoff (the delivery row
    holds the count and gives up after NOTIFY_MAX_ATTEMPTS)."""
    outcome = sending.deliver(delivery_id)
    if outcome is not None and outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.state if outcome else None


@portal_task(name="tenants.tasks.deliver_due_notifications")
def deliver_due_notifications() -> int:
    return sending.deliver_due()
