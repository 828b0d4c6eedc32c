from core.tasks import portal_task
from tenants import services


@portal_task(name="tenants.tasks.expire_grants")
def expire_grants() -> int:
    return services.expire_grants()


@portal_task(name="tenants.tasks.warn_expiring_grants")
def warn_expiring_grants() -> int:
    return services.warn_expiring_grants()
