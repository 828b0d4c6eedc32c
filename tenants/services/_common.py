"""What the services of the governance core share: audited field lists and the reconcile hint."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.urls import reverse

from tenants.models import Tenant
from tenants.signals import desired_state_changed

User = get_user_model()

REQUEST_FIELDS = ["state", "starts_at", "ends_at", "decided_by", "decision_comment"]
TENANT_FIELDS = ["slug", "name", "status", "cost_centre", "gpu_ceiling", "monthly_budget"]
GRANT_FIELDS = ["resource_class", "amount", "starts_at", "ends_at", "state"]


def _notify_desired_state_changed(tenant: Tenant) -> None:
    """After commit, tell the reconciler (a hint: the periodic reconcile heals a lost one)."""
    tenant_id = tenant.pk
    transaction.on_commit(lambda: desired_state_changed.send(Tenant, tenant_id=tenant_id))


def portal_url(name: str, *args) -> str:
    """An absolute link to a portal page, for mails and chat messages."""
    return f"{settings.PORTAL_BASE_URL.rstrip('/')}{reverse(name, args=args)}"
