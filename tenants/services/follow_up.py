"""What a service leaves for after its transaction: the hint to the reconciler, sent on commit,
and the absolute links its mails and chat messages carry."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from tenants import hooks
from tenants.models import Tenant


def notify_desired_state_changed(tenant: Tenant) -> None:
    """After commit, tell the reconciler (a hint: the periodic reconcile heals a lost one)."""
    tenant_id = tenant.pk
    # the cluster layer queues the tenant's reconcile (portal/wiring.py)
    transaction.on_commit(lambda: hooks.desired_state_changed(tenant_id))


def portal_url(name: str, *args) -> str:
    """An absolute link to a portal page, for mails and chat messages."""
    return f"{settings.PORTAL_BASE_URL.rstrip('/')}{reverse(name, args=args)}"
