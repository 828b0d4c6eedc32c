from django.conf import settings
from django.dispatch import receiver

from tenants.signals import desired_state_changed


@receiver(desired_state_changed)
def enqueue_reconcile(sender, tenant_id: int, **kwargs) -> None:
    if not settings.RECONCILE_ON_COMMIT:
        return
    from scheduler.tasks import reconcile_tenant

    reconcile_tenant.apply_async(kwargs={"tenant_id": tenant_id})
