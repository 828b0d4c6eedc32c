"""The notification layer's pure parts: who hears of what, signatures, secrets, backoff."""

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest

from tenants.models import NotificationDelivery, Tenant
from tenants.models.notifications import MAIL_TO_APPROVERS
from tenants.notifications import EVENTS, signing
from tenants.notifications.events import Audience, channel_wants, event
from tenants.notifications.sending import backoff, slack_body, webhook_body


def test_every_event_of_the_issue_is_there():
    assert set(EVENTS) == {
        "capacity_request.submitted",
        "capacity_request.decided",
        "grant.expiring",
        "grant.expired",
        "grant.started",  # booking ahead (issue 52, 4)
        "api_token.expiry_set",  # security, third pass (5)
        "api_token.revoked_with_maker",
        "workload.preempted",
        "workload.failed",
        "budget.reached_80",
        "budget.reached_100",
        "budget.forecast_over",
        "department.budget_reached_80",
        "department.budget_reached_100",
        "department.budget_forecast_over",
        "gpu.health",
        "workload.stopped_over_quota",
        "workload.reclaimed",
        "workload.idle_warning",
        "workload.idle_suspended",
        "tenant.no_owner",
    }
    # the delivery log hides the approvers' mail from teams by this list
    assert set(MAIL_TO_APPROVERS) == {
        e.name for e in EVENTS.values() if e.audience == Audience.APPROVERS
    }
    assert event("capacity_request.submitted").audience == Audience.APPROVERS
    assert event("capacity_request.decided").audience == Audience.PERSON
    with pytest.raises(ValueError, match="unknown notification event"):
        event("grant.renamed")


def test_channels_take_their_own_events_or_their_scopes_default():
    assert channel_wants([], "workload.failed", platform_channel=False)
    assert not channel_wants([], "workload.failed", platform_channel=True)
    assert channel_wants([], "capacity_request.submitted", platform_channel=True)
    assert channel_wants([], "gpu.health", platform_channel=True)
    assert channel_wants(["workload.failed"], "workload.failed", platform_channel=True)
    assert not channel_wants(["grant.expired"], "workload.failed", platform_channel=False)


def test_a_signature_is_the_hmac_sha256_of_the_exact_body(settings):
    secret = "whsec_test"
    body = b'{"event":"grant.expired"}'
    header = signing.sign(secret, body)
    # The value any receiver computes with the standard library.
    import hashlib
    import hmac

    assert header == "sha256=" + hmac.new(b"whsec_test", body, hashlib.sha256).hexdigest()
    assert signing.verify(secret, body, header)
    assert not signing.verify(secret, body + b" ", header)
    assert not signing.verify("other", body, header)


def test_secrets_are_stored_encrypted_and_read_back(settings):
    settings.NOTIFICATION_SECRET_KEY = "key-one"
    secret = signing.new_secret()
    stored = signing.encrypt_secret(secret)
    assert secret not in stored and signing.decrypt_secret(stored) == secret
    settings.NOTIFICATION_SECRET_KEY = "key-two"
    with pytest.raises(ValueError, match="NOTIFICATION_SECRET_KEY changed"):
        signing.decrypt_secret(stored)


def test_backoff_doubles_and_is_capped(settings):
    settings.NOTIFY_RETRY_BASE_S = 15
    settings.NOTIFY_RETRY_MAX_S = 100
    assert [backoff(n) for n in (1, 2, 3, 4, 5)] == [15, 30, 60, 100, 100]


def test_the_bodies_of_a_webhook_and_a_slack_message():
    delivery = NotificationDelivery(
        pk=7,
        event="grant.expired",
        tenant=Tenant(slug="team-a"),
        subject="quota ended",
        text="it ended",
        data={"grant": 3},
    )
    body = webhook_body(delivery, datetime(2027, 1, 2, 3, 4, tzinfo=UTC))
    assert json.loads(body) == {
        "delivery": 7,
        "event": "grant.expired",
        "tenant": "team-a",
        "subject": "quota ended",
        "text": "it ended",
        "data": {"grant": 3},
        "sent_at": "2027-01-02T03:04:00+00:00",
    }
    assert json.loads(slack_body(delivery)) == {"text": "*quota ended*\nit ended"}


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hook",
        "https://10.2.3.4/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/hook",
        "https://localhost:8443/hook",
        "https://192.168.1.20/hook",
    ],
)
def test_a_webhook_inside_the_network_is_refused_for_good(settings, url):
    from tenants.notifications import sending

    settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(sending.PermanentFailure, match="inside the network"):
        sending.check_destination(url)
    settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE = True  # a platform's own receivers: not checked,
    assert sending.check_destination(url) is None  # and not pinned (its proxies apply)


def test_a_public_webhook_address_passes(settings):
    from tenants.notifications import sending

    settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE = False
    # a literal address needs no DNS; it is the address the message will go to
    assert sending.check_destination("https://8.8.8.8/hook") == "8.8.8.8"


def test_a_receivers_redirect_is_not_followed(settings):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tenants.notifications import sending

    class Redirects(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE = True
    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirects)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        with pytest.raises(sending.PermanentFailure, match="the receiver redirects"):
            sending._post(url, b"{}", {})
    finally:
        server.shutdown()
        server.server_close()


def _fake_dns(monkeypatch, answers: dict[str, str]):
    """Name lookups answered from `answers` (a stand-in for a resolver that a receiver's owner
    controls); every other name, and literal addresses, resolve as usual."""
    import socket

    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in answers:
            return real(answers[host], port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_the_address_checked_is_the_one_a_webhook_is_sent_to(settings, monkeypatch):
    """DNS rebinding: a name that answers a public address to the check and an inside one to
    the connection would reach the network. The message goes to the address checked."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tenants.notifications import sending

    settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE = False
    _fake_dns(monkeypatch, {"hooks.example": "8.8.8.8"})
    assert sending.check_destination("https://hooks.example/in") == "8.8.8.8"

    seen = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            seen.append(
                (self.headers["Host"], self.rfile.read(int(self.headers["Content-Length"])))
            )
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    # the name now answers an address where nothing listens: the pinned opener never asks
    _fake_dns(monkeypatch, {"rebind.example": "10.255.255.1"})
    request = urllib.request.Request(
        f"http://rebind.example:{port}/hook", data=b'{"x": 1}', method="POST"
    )
    try:
        with sending._opener("127.0.0.1").open(request, timeout=5) as response:
            assert response.status == 204
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [(f"rebind.example:{port}", b'{"x": 1}')]  # the name kept, for TLS and Host


def test_a_pinned_https_webhook_still_checks_the_certificate_against_the_name(
    tmp_path, monkeypatch
):
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from tenants.notifications import sending

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hooks.example")])
    always = (datetime(1970, 1, 2, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC))  # any day
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(always[0]).not_valid_after(always[1])
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("hooks.example")]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert_file, key_file)
    server.socket = served.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    _fake_dns(monkeypatch, {"hooks.example": "10.255.255.1", "other.example": "10.255.255.1"})

    def post(host: str) -> int:
        handler = sending._PinnedHTTPS("127.0.0.1")
        handler._context = ssl.create_default_context(cafile=str(cert_file))  # trust the receiver
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), handler)
        request = urllib.request.Request(f"https://{host}:{port}/in", data=b"{}", method="POST")
        with opener.open(request, timeout=5) as response:
            return response.status

    try:
        assert post("hooks.example") == 204  # pinned, and the certificate is the name's
        with pytest.raises(urllib.error.URLError, match="certificate|hostname"):
            post("other.example")  # the same address under a name the certificate lacks
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("10.0.0.1", False),
        ("::ffff:10.0.0.1", False),  # IPv4-mapped
        ("64:ff9b::a9fe:a9fe", False),  # NAT64 of 169.254.169.254, the cloud's metadata
        ("2002:7f00:1::", False),  # 6to4 of 127.0.0.1
        ("::127.0.0.1", False),  # IPv4-compatible
        ("::1", False),
    ],
)
def test_an_ipv6_address_that_carries_an_inside_ipv4_one_is_not_public(address, public):
    import ipaddress

    from tenants.notifications.sending import is_public

    assert is_public(ipaddress.ip_address(address)) is public
