"""Sending one delivery (e-mail, signed webhook, Slack-compatible webhook) with the retry
bookkeeping, and the periodic sweep of what is due."""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from tenants.models import NotificationChannel, NotificationDelivery
from tenants.notifications import signing

log = logging.getLogger(__name__)
Kind = NotificationChannel.Kind
State = NotificationDelivery.State


@dataclass(frozen=True)
class Outcome:
    state: str
    retry_in: float | None = None  # seconds, when it will be tried again


class PermanentFailure(Exception):
    """The receiver refused the message for good (a 4xx): do not retry."""


def backoff(attempts: int) -> float:
    """Seconds before attempt `attempts + 1`: doubling from NOTIFY_RETRY_BASE_S, capped."""
    wait = settings.NOTIFY_RETRY_BASE_S * 2 ** max(0, attempts - 1)
    return min(wait, settings.NOTIFY_RETRY_MAX_S)


def webhook_body(delivery: NotificationDelivery, sent_at: datetime) -> bytes:
    """The generic webhook's JSON: what happened, for whom, and a delivery id (receivers use
    it to drop duplicates: a retry after a lost answer sends the same id again)."""
    body = {
        "delivery": delivery.pk,
        "event": delivery.event,
        "tenant": delivery.tenant.slug if delivery.tenant else None,
        "subject": delivery.subject,
        "text": delivery.text,
        "data": delivery.data,
        "sent_at": sent_at.isoformat(),
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def slack_body(delivery: NotificationDelivery) -> bytes:
    return json.dumps({"text": f"*{delivery.subject}*\n{delivery.text}"}).encode()


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A receiver's redirect is not followed: it could point inside the network."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A global address, also for the IPv6 forms that carry an IPv4 one (mapped, 6to4, NAT64,
    compatible): `::ffff:10.0.0.1` or `64:ff9b::a9fe:a9fe` reach the inside as the IPv4 would."""
    if not address.is_global:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        packed = address.packed
        embedded = [address.ipv4_mapped, address.sixtofour]
        if address in _NAT64 or packed[:12] == bytes(12):
            embedded.append(ipaddress.IPv4Address(packed[12:]))
        return all(v4 is None or v4.is_global for v4 in embedded)
    return True


def check_destination(url: str) -> str | None:
    """A webhook goes to public addresses only: a team owner's URL must not reach the portal's
    own network (its database, the API server, cloud metadata). Returns the address checked,
    which the message must then go to (a second lookup could answer otherwise: DNS
    rebinding); None where NOTIFY_WEBHOOK_ALLOW_PRIVATE lets a platform send anywhere."""
    if settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE:
        return None
    host = urlsplit(url).hostname or ""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConnectionError(f"cannot resolve {host!r}: {exc}") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    for address in addresses:
        if not is_public(address):
            # the address stays in the server's log: teams read the delivery's error, and the
            # network's inside is not theirs to map
            log.warning("webhook host %s resolves to %s, inside the network", host, address)
            raise PermanentFailure(
                f"{host} resolves to an address inside the network: webhooks go to public "
                "hosts (a platform admin may allow others: NOTIFY_WEBHOOK_ALLOW_PRIVATE)"
            )
    if not addresses:
        raise ConnectionError(f"{host!r} resolves to no address")
    return str(addresses[0])


def _pinned(connection_class, address: str):
    """`connection_class` connecting to `address` whatever its host name resolves to now; TLS
    still checks the certificate against the name and the Host header still carries it."""

    class Pinned(connection_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._create_connection = lambda where, *rest: socket.create_connection(
                (address, where[1]), *rest
            )

    return Pinned


class _PinnedHTTP(urllib.request.HTTPHandler):
    def __init__(self, address: str):
        super().__init__()
        self.address = address

    def http_open(self, req):
        return self.do_open(_pinned(http.client.HTTPConnection, self.address), req)


class _PinnedHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, address: str):
        super().__init__()
        self.address = address

    def https_open(self, req):
        return self.do_open(
            _pinned(http.client.HTTPSConnection, self.address), req, context=self._context
        )


def _opener(address: str | None):
    if address is None:
        return _OPENER
    # No proxy from the environment: the address checked is the one connected to.
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}), _NoRedirects, _PinnedHTTP(address), _PinnedHTTPS(address)
    )


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    if not url.startswith(("https://", "http://")):  # channels are checked so; never file: etc.
        raise PermanentFailure(f"not an http(s) URL: {url[:40]!r}")
    opener = _opener(check_destination(url))
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "gpu-portal", **headers},
    )
    try:
        timeout = settings.NOTIFY_HTTP_TIMEOUT_S
        with opener.open(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:
            raise PermanentFailure(
                f"HTTP {exc.code}: the receiver redirects; give the channel its final URL"
            ) from None
        if 400 <= exc.code < 500 and exc.code not in (408, 429):
            raise PermanentFailure(f"HTTP {exc.code} {exc.reason}") from None
        raise ConnectionError(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise ConnectionError(str(exc.reason)) from None
    except http.client.HTTPException as exc:  # a malformed answer (status line, headers)
        raise ConnectionError(f"the receiver's answer is not HTTP: {type(exc).__name__}") from None


def _send(delivery: NotificationDelivery, now: datetime) -> int | None:
    channel = delivery.channel
    if channel is None:
        send_mail(delivery.subject, delivery.text, settings.DEFAULT_FROM_EMAIL, delivery.recipients)
        return None
    if channel.kind == Kind.EMAIL:
        to = [a.strip() for a in channel.target.split(",") if a.strip()]
        send_mail(delivery.subject, delivery.text, settings.DEFAULT_FROM_EMAIL, to)
        return None
    if channel.kind == Kind.SLACK:
        return _post(channel.target, slack_body(delivery), {})
    body = webhook_body(delivery, now)
    secret = signing.decrypt_secret(channel.secret_encrypted)
    headers = {
        signing.SIGNATURE_HEADER: signing.sign(secret, body),
        "X-Portal-Event": delivery.event,
        "X-Portal-Delivery": str(delivery.pk),
    }
    return _post(channel.target, body, headers)


def lease_seconds() -> float:
    """How long a claimed delivery is left to its worker: longer than any one send can take
    (each socket wait is bounded by the HTTP or e-mail timeout, and a send has few of them)."""
    return max(300.0, 10 * max(settings.NOTIFY_HTTP_TIMEOUT_S, settings.EMAIL_TIMEOUT or 0))


def _claim(delivery_id: int, now: datetime) -> NotificationDelivery | None:
    """Take a due delivery for one attempt (a short transaction, no lock held while sending):
    its next attempt moves a lease ahead, so a second worker or the sweep leaves it alone.
    The lease runs from the clock, not from `now` (a long sweep's start)."""
    with transaction.atomic():
        delivery = (
            NotificationDelivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("channel", "tenant")
            .filter(pk=delivery_id, state=State.PENDING, next_attempt_at__lte=now)
            .first()
        )
        if delivery is None:
            return None
        delivery.attempts += 1
        delivery.next_attempt_at = max(now, timezone.now()) + timedelta(seconds=lease_seconds())
        delivery.save(update_fields=["attempts", "next_attempt_at"])
    return delivery


def deliver(delivery_id: int, *, now: datetime | None = None) -> Outcome | None:
    """Send one pending delivery if it is due; None when it is not (sent already, given up,
    or another worker has it). A transient failure schedules the next attempt with backoff,
    up to NOTIFY_MAX_ATTEMPTS; a receiver's 4xx fails it at once."""
    now = now or timezone.now()
    delivery = _claim(delivery_id, now)
    if delivery is None:
        return None
    status: int | None = None
    error = ""
    permanent = False
    try:
        status = _send(delivery, now)
    except PermanentFailure as exc:
        error, permanent = str(exc), True
    except (ConnectionError, TimeoutError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    except ValueError as exc:  # a secret that no longer decrypts: nothing a retry can fix
        error, permanent = str(exc), True
    except Exception as exc:  # anything else still counts as a try, so the limit holds
        log.exception("notification %s: sending failed unexpectedly", delivery.pk)
        error = f"{type(exc).__name__}: {exc}"
    finished = timezone.now()
    update: dict = {"last_error": error[:2000], "response_status": status}
    if not error:
        update.update(state=State.SENT, sent_at=finished)
        outcome = Outcome(State.SENT)
    elif permanent or delivery.attempts >= settings.NOTIFY_MAX_ATTEMPTS:
        update.update(state=State.FAILED)
        outcome = Outcome(State.FAILED)
        log.warning("notification %s to %s failed: %s", delivery.event, delivery.channel, error)
    else:
        wait = backoff(delivery.attempts)
        update.update(next_attempt_at=finished + timedelta(seconds=wait))
        outcome = Outcome(State.PENDING, retry_in=wait)
    # Only while the row is still this attempt's: one that outlived its lease was claimed again,
    # and that attempt's result is the one to keep.
    if not NotificationDelivery.objects.filter(pk=delivery.pk, attempts=delivery.attempts).update(
        **update
    ):
        log.warning(
            "notification %s: attempt %s outlived its lease", delivery.pk, delivery.attempts
        )
    return outcome


def deliver_due(*, now: datetime | None = None, limit: int = 200) -> int:
    """The periodic sweep: send what is due (a lost message, a retry whose task was lost).
    Returns how many were attempted."""
    now = now or timezone.now()
    due = NotificationDelivery.objects.filter(state=State.PENDING, next_attempt_at__lte=now)
    attempted = 0
    for delivery_id in list(due.order_by("next_attempt_at").values_list("pk", flat=True)[:limit]):
        try:
            if deliver(delivery_id, now=now) is not None:
                attempted += 1
        except Exception:  # one delivery's trouble (its row, the database) never ends the sweep
            log.exception("notification %s: the sweep could not deliver it", delivery_id)
    return attempted
