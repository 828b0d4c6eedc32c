"""Governance says when a tenant's desired state may have changed; the cluster reconciles it.

The message is a hint: if the broker cannot take it (Redis down), the change is committed all
the same and the periodic reconcile applies it, so the request that made it still succeeds."""

from django.conf import settings
from django.dispatch import receiver

from core.tasks import send_hint
from scheduler.cluster.tasks import reconcile_all, reconcile_tenant
from tenants.signals import desired_state_changed, fleet_policy_changed


@receiver(desired_state_changed)
def enqueue_reconcile(sender, tenant_id: int, **kwargs) -> None:
    if not settings.RECONCILE_ON_COMMIT:
        return
    send_hint(reconcile_tenant, f"tenant {tenant_id}", tenant_id=tenant_id)


@receiver(fleet_policy_changed)
def enqueue_reconcile_all(sender, **kwargs) -> None:
    if not settings.RECONCILE_ON_COMMIT:
        return
    send_hint(reconcile_all, "every tenant")
