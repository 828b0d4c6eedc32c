"""Governance says when a tenant's desired state may have changed; the cluster reconciles it."""

from django.conf import settings
from django.dispatch import receiver

from scheduler.cluster.tasks import reconcile_all, reconcile_tenant
from tenants.signals import desired_state_changed, fleet_policy_changed


@receiver(desired_state_changed)
def enqueue_reconcile(sender, tenant_id: int, **kwargs) -> None:
    if not settings.RECONCILE_ON_COMMIT:
        return
    reconcile_tenant.apply_async(kwargs={"tenant_id": tenant_id})


@receiver(fleet_policy_changed)
def enqueue_reconcile_all(sender, **kwargs) -> None:
    if not settings.RECONCILE_ON_COMMIT:
        return
    reconcile_all.apply_async()
