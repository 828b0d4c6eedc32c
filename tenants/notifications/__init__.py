"""One notification layer for the portal: events (`events.EVENTS`) go to the people concerned
by e-mail and to the channels of their tenant and of the platform team (e-mail, a generic
webhook signed with HMAC-SHA256, a Slack-compatible incoming webhook). `notify()` records the
deliveries in the caller's transaction; Celery sends them after commit, with retries and
backoff; `NotificationDelivery` is the log the console shows.

Callers: `from tenants.notifications import notify`."""

from tenants.notifications.dispatch import enqueue, notify
from tenants.notifications.events import EVENTS, Audience, Event
from tenants.notifications.sending import deliver, deliver_due

__all__ = ["EVENTS", "Audience", "Event", "deliver", "deliver_due", "enqueue", "notify"]
