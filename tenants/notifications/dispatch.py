"""`notify()`: record one delivery per channel (and one e-mail to the people concerned) in the
caller's transaction, and hand them to Celery after commit (`sending` sends them). Sending
never happens inside a request or a service's transaction."""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q

from core.tasks import send_hint
from tenants.models import NotificationChannel, NotificationDelivery, Tenant
from tenants.notifications import tasks
from tenants.notifications.events import Audience, channel_wants, event

User = get_user_model()


def _emails(users: Iterable) -> list[str]:
    return sorted({u.email for u in users if getattr(u, "email", "")})


def _audience(name: str, tenant: Tenant | None, person, department) -> list[str]:
    audience = event(name).audience
    if audience == Audience.OWNERS and tenant is not None:
        return tenant.owner_emails()
    if audience == Audience.APPROVERS:
        # `core.permissions.is_platform_admin`, as one query; and the admins of the team's
        # department, who decide its asks within the department's quota.
        who = Q(is_superuser=True) | Q(is_staff=True, groups__name=settings.PLATFORM_ADMIN_GROUP)
        if tenant is not None and tenant.department_id is not None:
            who |= Q(administered_departments=tenant.department_id)
        admins = User.objects.filter(who, is_active=True)
        return _emails(admins.exclude(email="").distinct())
    if audience == Audience.DEPARTMENT_ADMINS and department is not None:
        return _emails(department.admins.filter(is_active=True).exclude(email=""))
    if audience == Audience.PERSON and person is not None and person.is_active:
        return _emails([person])
    return []


def notify(
    name: str,
    tenant: Tenant | None,
    *,
    subject: str,
    text: str,
    data: dict | None = None,
    person=None,
    department=None,
) -> list[NotificationDelivery]:
    """Tell the people and channels concerned that `name` happened (see `events.EVENTS`).
    Call it inside the transaction that made the change: the deliveries are written with it
    and sent by Celery only once it commits (a rollback sends nothing). `person`: the
    requester or submitter, for the events addressed to one person; `department`, for those
    addressed to a department's admins (with `tenant` None, only the platform's channels hear
    of them besides). Never raises for a delivery problem; an unknown event name is a
    programming error (ValueError)."""
    event(name)  # refuse unknown names at once
    data = {"event": name, "tenant": tenant.slug if tenant else None, **(data or {})}
    if department is not None:
        data["department"] = department.slug
    deliveries: list[NotificationDelivery] = []
    recipients = (
        _audience(name, tenant, person, department) if settings.NOTIFY_PERSONAL_EMAIL else []
    )
    if recipients:
        deliveries.append(
            NotificationDelivery(
                tenant=tenant,
                event=name,
                recipients=recipients,
                subject=subject[:200],
                text=text,
                data=data,
            )
        )
    scope = Q(tenant__isnull=True) | (Q(tenant=tenant) if tenant is not None else Q(pk__in=[]))
    for channel in NotificationChannel.objects.filter(scope, active=True):
        if channel_wants(channel.events, name, platform_channel=channel.tenant_id is None):
            deliveries.append(
                NotificationDelivery(
                    channel=channel,
                    tenant=tenant,
                    event=name,
                    subject=subject[:200],
                    text=text,
                    data=data,
                )
            )
    if not deliveries:
        return []
    created = NotificationDelivery.objects.bulk_create(deliveries)
    ids = [d.pk for d in created]
    transaction.on_commit(lambda: enqueue(ids))
    return created


def enqueue(ids: list[int]) -> None:
    """Queue each delivery's task. A broker that is down only delays the message: the periodic
    sweep (`sending.deliver_due`) sends what is still pending."""
    for delivery_id in ids:
        send_hint(tasks.deliver_notification, "a notification", delivery_id=delivery_id)
