"""The governance core's models, a module per concept: `tenants` (tenants and memberships),
`requests` (the auto-approval envelope, capacity requests and their items, quota grants),
`audit` (the append-only audit log), `departments` (departments over teams), `tokens` (API
tokens), `notifications` (channels and deliveries) and `priority_classes` (the portal's
priority classes, plain data).

Django finds an app's models through its `models` module, so this one imports every model
class; that is its only job. Other names (querysets, validators, constants) are imported from
the module of their concept."""

from __future__ import annotations

from tenants.models.audit import AuditEvent
from tenants.models.departments import Department, DepartmentEnvelope, DepartmentQuota
from tenants.models.notifications import NotificationChannel, NotificationDelivery
from tenants.models.requests import (
    AutoApprovalRule,
    CapacityRequest,
    CapacityRequestItem,
    QuotaGrant,
)
from tenants.models.tenants import Membership, Tenant
from tenants.models.tokens import ApiToken

__all__ = [
    "ApiToken",
    "AuditEvent",
    "AutoApprovalRule",
    "CapacityRequest",
    "CapacityRequestItem",
    "Department",
    "DepartmentEnvelope",
    "DepartmentQuota",
    "Membership",
    "NotificationChannel",
    "NotificationDelivery",
    "QuotaGrant",
    "Tenant",
]
