"""Governance says when a tenant's desired state may have changed; the cluster reconciles it.
These answer the `desired_state_changed` and `fleet_policy_changed` hooks (portal/wiring.py).

The message is a hint: if the broker cannot take it (Redis down), the change is committed all
the same and the periodic reconcile applies it, so the request that made it still succeeds."""

from django.conf import settings

from core.tasks import send_hint
from scheduler.cluster.tasks import reconcile_all, reconcile_tenant


def enqueue_reconcile(tenant_id: int) -> None:
    if not settings.RECONCILE_ON_COMMIT:
        return
    send_hint(reconcile_tenant, f"tenant {tenant_id}", tenant_id=tenant_id)


def enqueue_reconcile_all() -> None:
    if not settings.RECONCILE_ON_COMMIT:
        return
    send_hint(reconcile_all, "every tenant")
