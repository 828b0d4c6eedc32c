"""Notification channels: added by a tenant's owners (or, for the platform team's channels,
by platform admins), removed, and tried with a test message; each change audited."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from core import audit
from core.errors import InvalidInput, InvalidTransition
from core.permissions import require_platform_admin
from tenants.models import NotificationChannel, NotificationDelivery, Tenant
from tenants.models.notifications import shown_target
from tenants.notifications import EVENTS, signing
from tenants.notifications.dispatch import enqueue
from tenants.notifications.sending import is_public
from tenants.permissions import OWNER_ROLES, require_role

Kind = NotificationChannel.Kind
CHANNEL_FIELDS = ["kind", "name", "target", "events", "active"]


TARGET_MAX: int = NotificationChannel._meta.get_field("target").max_length or 500
NAME_MAX: int = NotificationChannel._meta.get_field("name").max_length or 80


def _no_control_characters(value: str, field: str) -> None:
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidInput(f"the {field} has control characters; type it plainly", field=field)


def _audited(channel: NotificationChannel) -> dict:
    """The channel as its audit events keep it: a Slack URL cut as pages show it (it is the
    credential to post, and the audit log is read by every member of the team)."""
    return {
        **audit.snapshot(channel, CHANNEL_FIELDS),
        "target": shown_target(channel.kind, channel.target),
    }


def _check_target(kind: str, target: str) -> str:
    target = _check_target_form(kind, (target or "").strip())
    if len(target) > TARGET_MAX:  # checked as stored (addresses are re-joined with spaces)
        raise InvalidInput(
            f"the target may be at most {TARGET_MAX} characters; it has {len(target)}",
            field="target",
        )
    return target


def _check_target_form(kind: str, target: str) -> str:
    _no_control_characters(target, "target")
    if kind == Kind.EMAIL:
        addresses = [a.strip() for a in target.split(",") if a.strip()]
        if not addresses:
            raise InvalidInput("give at least one e-mail address", field="target")
        for address in addresses:
            try:
                validate_email(address)
            except ValidationError:
                message = f"{address!r} is not an e-mail address"
                raise InvalidInput(message, field="target") from None
        return ", ".join(addresses)
    parts = urlsplit(target)
    schemes = {"https", "http"} if settings.NOTIFY_WEBHOOK_ALLOW_HTTP else {"https"}
    if parts.scheme not in schemes or not parts.hostname:
        raise InvalidInput(
            f"the URL must be {' or '.join(sorted(s + '://' for s in schemes))}…", field="target"
        )
    if parts.username or parts.password:
        raise InvalidInput("put no user or password in the URL", field="target")
    if not settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE and _inside_the_network(parts.hostname):
        raise InvalidInput(
            f"{parts.hostname} is inside the network: webhooks go to public hosts (a platform "
            "admin may allow others: NOTIFY_WEBHOOK_ALLOW_PRIVATE)",
            field="target",
        )
    return target


def _inside_the_network(host: str) -> bool:
    """A literal internal address or localhost, refused up front (a name that resolves inside
    the network is refused when sending, sending.check_destination)."""
    if host.lower() in ("localhost", "localhost.localdomain") or host.lower().endswith(".local"):
        return True
    try:
        return not is_public(ipaddress.ip_address(host))
    except ValueError:
        return False


def _check_events(events: list[str] | None) -> list[str]:
    events = sorted(set(events or []))
    unknown = set(events) - set(EVENTS)
    if unknown:
        raise InvalidInput(
            f"unknown events {', '.join(sorted(unknown))}; choose from {', '.join(sorted(EVENTS))}",
            field="events",
        )
    return events


def _require_manager(actor, tenant: Tenant | None, doing: str) -> None:
    if tenant is None:
        # `doing` is e.g. "add notification channels": name the platform's, and a team's way
        require_platform_admin(
            actor, f"{doing} for the platform team (for your team's, give its tenant slug)"
        )
    else:
        require_role(actor, tenant, OWNER_ROLES, doing)


def create_channel(
    *,
    actor,
    tenant: Tenant | None,
    kind: str,
    name: str,
    target: str,
    events: list[str] | None = None,
) -> tuple[NotificationChannel, str | None]:
    """Add a channel; for a webhook, return its signing secret too, shown this once (it is
    stored only encrypted)."""
    _require_manager(actor, tenant, "add notification channels")
    if kind not in Kind.values:
        raise InvalidInput(
            f"unknown kind {kind!r}; choose from {', '.join(Kind.values)}", field="kind"
        )
    name = _check_name(name)
    target = _check_target(kind, target)
    events = _check_events(events)
    secret = signing.new_secret() if kind == Kind.WEBHOOK else None
    with transaction.atomic():
        channel = NotificationChannel.objects.create(
            tenant=tenant,
            kind=kind,
            name=name,
            target=target,
            events=events,
            secret_encrypted=signing.encrypt_secret(secret) if secret else "",
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
        )
        audit.record(
            actor=actor,
            verb="notification_channel.added",
            obj=channel,
            tenant=tenant,
            after=_audited(channel),
        )
    return channel, secret


def _check_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise InvalidInput("give the channel a name", field="name")
    _no_control_characters(name, "name")
    if len(name) > NAME_MAX:
        raise InvalidInput(f"the name may be at most {NAME_MAX} characters", field="name")
    return name


def change_channel(
    *,
    actor,
    channel: NotificationChannel,
    name: str | None = None,
    target: str | None = None,
    events: list[str] | None = None,
) -> NotificationChannel:
    """Rename a channel, point it elsewhere or pick its events (None: unchanged). A webhook
    keeps its signing secret, so its receiver needs no new one."""
    _require_manager(actor, channel.tenant, "change notification channels")
    changes: dict = {}
    if name is not None:
        changes["name"] = _check_name(name)
    if target is not None:
        changes["target"] = _check_target(channel.kind, target)
    if events is not None:
        changes["events"] = _check_events(events)
    with transaction.atomic():
        channel = NotificationChannel.objects.select_for_update().get(pk=channel.pk)
        if not channel.active:
            raise InvalidTransition(f"channel {channel.name} is removed; add a new one")
        before = _audited(channel)
        for field, value in changes.items():
            setattr(channel, field, value)
        after = _audited(channel)
        if after == before:
            return channel  # nothing to change, nothing to record
        channel.save(update_fields=list(changes))
        audit.record(
            actor=actor,
            verb="notification_channel.changed",
            obj=channel,
            tenant=channel.tenant,
            before=before,
            after=after,
        )
    return channel


def remove_channel(*, actor, channel: NotificationChannel) -> None:
    """Take a channel out of use. Its row stays, inactive and without its signing key, so the
    delivery log keeps what was sent to it; what was still waiting is failed, not sent."""
    _require_manager(actor, channel.tenant, "remove notification channels")
    with transaction.atomic():
        channel = NotificationChannel.objects.select_for_update().get(pk=channel.pk)
        if not channel.active:
            raise InvalidTransition(f"channel {channel.name} is removed already")
        before = _audited(channel)
        channel.active = False
        channel.secret_encrypted = ""
        channel.save(update_fields=["active", "secret_encrypted"])
        NotificationDelivery.objects.filter(
            channel=channel, state=NotificationDelivery.State.PENDING
        ).update(
            state=NotificationDelivery.State.FAILED,
            last_error="the channel was removed before this was sent",
        )
        audit.record(
            actor=actor,
            verb="notification_channel.removed",
            obj=channel,
            tenant=channel.tenant,
            before=before,
            after=_audited(channel),
        )


def send_test_message(*, actor, channel: NotificationChannel):
    """Send a test message to this channel only (through the same queue and log)."""
    _require_manager(actor, channel.tenant, "test notification channels")
    with transaction.atomic():
        delivery = NotificationDelivery.objects.create(
            channel=channel,
            tenant=channel.tenant,
            event="test",
            subject=f"[GPU Portal] test of {channel.name}",
            text=f"A test message from the GPU Portal, asked for by {actor.get_username()}.",
            data={"event": "test", "tenant": channel.tenant.slug if channel.tenant else None},
        )
        transaction.on_commit(lambda: enqueue([delivery.pk]))
    return delivery
