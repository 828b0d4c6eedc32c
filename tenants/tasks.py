from core.tasks import portal_task
from tenants import services


@portal_task(name="tenants.tasks.expire_grants")
def expire_grants() -> int:
    return services.expire_grants()


@portal_task(name="tenants.tasks.warn_expiring_grants")
def warn_expiring_grants() -> int:
    return services.warn_expiring_grants()


# The notification layer's tasks live with it; importing them here registers them.
from tenants.notifications.tasks import (  # noqa: E402, F401
    deliver_due_notifications,
    deliver_notification,
)
