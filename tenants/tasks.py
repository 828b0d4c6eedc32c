from core.tasks import portal_task
from tenants import audit_chain
from tenants.services import bookings
from tenants.services import grants as grant_services
from tenants.services import tokens as token_services


@portal_task(name="tenants.tasks.expire_grants")
def expire_grants() -> int:
    return grant_services.expire_grants()


@portal_task(name="tenants.tasks.warn_expiring_grants")
def warn_expiring_grants() -> int:
    return grant_services.warn_expiring_grants()


@portal_task(name="tenants.tasks.hint_grant_boundaries")
def hint_grant_boundaries() -> int:
    """Every few seconds: the teams whose grants started or ended lately are reconciled, and
    told when a booking starts and a day before it ends (tenants.services.bookings)."""
    return bookings.hint_boundaries()


# The notification layer's tasks live with it; importing them here registers them.
from tenants.notifications.tasks import (  # noqa: E402, F401
    deliver_due_notifications,
    deliver_notification,
)


@portal_task(name="tenants.tasks.seal_audit_log")
def seal_audit_log() -> int:
    return audit_chain.seal_pending()


@portal_task(name="tenants.tasks.give_tokens_an_expiry")
def give_tokens_an_expiry() -> int:
    """Tokens made before every token had an end get one; robot tokens of people who left
    their team before leaving revoked them are revoked (both level-triggered, daily)."""
    return token_services.give_tokens_an_expiry() + token_services.revoke_robot_tokens_of_leavers()
