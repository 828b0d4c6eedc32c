"""Governance says when a tenant's desired state may have changed; the cluster reconciles it.

The message is a hint: if the broker cannot take it (Redis down), the change is committed all
the same and the periodic reconcile applies it, so the request that made it still succeeds."""

import logging

from django.conf import settings
from django.dispatch import receiver

from scheduler.cluster.tasks import reconcile_all, reconcile_tenant
from tenants.signals import desired_state_changed, fleet_policy_changed

log = logging.getLogger(__name__)


@receiver(desired_state_changed)
def enqueue_reconcile(sender, tenant_id: int, **kwargs) -> None:
    if not settings.RECONCILE_ON_COMMIT:
        return
    try:
        reconcile_tenant.apply_async(kwargs={"tenant_id": tenant_id})
    except Exception:  # noqa: BLE001 - the periodic reconcile_all repairs a lost hint
        log.warning("could not queue the reconcile of tenant %s", tenant_id, exc_info=True)


@receiver(fleet_policy_changed)
def enqueue_reconcile_all(sender, **kwargs) -> None:
    if not settings.RECONCILE_ON_COMMIT:
        return
    try:
        reconcile_all.apply_async()
    except Exception:  # noqa: BLE001 - the periodic reconcile_all runs anyway
        log.warning("could not queue a reconcile of every tenant", exc_info=True)
