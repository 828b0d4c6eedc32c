"""Notifications end to end: a real local HTTP receiver (http.server in a thread), a real
Celery worker on the tests' Redis broker, PostgreSQL. Sent after commit, retried with backoff,
signed, never blocking the request that caused them; the delivery log in the API and pages."""

import json
import re
import socket
import threading
import time
from collections import deque
from datetime import timedelta

import pytest
from django.core import mail
from django.db import transaction
from django.test import Client
from django.utils import timezone

from core.errors import Forbidden, InvalidInput, NotFound
from scheduler.workloads import services as workloads
from scheduler.workloads.kinds.manifests import Observation
from scheduler.workloads.lifecycle.sync import change_state
from scheduler.workloads.models import Workload
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import AuditEvent, NotificationChannel, NotificationDelivery
from tenants.notifications import deliver_due, notify, signing
from tenants.services import approvals as approval_services
from tenants.services import channels as channel_services
from tenants.services import grants as grant_services
from tenants.services import requests as request_services
from tenants.services import tokens as token_services
from tests.portal.api.conftest import bearer, session
from tests.scheduler.cluster_helpers import celery_worker
from tests.tenants.receiver import start_receiver

State = NotificationDelivery.State


@pytest.fixture
def receiver():
    receiver = start_receiver()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


@pytest.fixture
def fast_retries(settings):
    settings.NOTIFY_WEBHOOK_ALLOW_HTTP = True  # the receiver is plain http on 127.0.0.1
    settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE = True  # ... inside the network
    settings.NOTIFY_RETRY_BASE_S = 0.2
    settings.NOTIFY_RETRY_MAX_S = 1.0
    settings.NOTIFY_MAX_ATTEMPTS = 3
    settings.NOTIFY_HTTP_TIMEOUT_S = 2.0
    settings.PORTAL_BASE_URL = "https://portal.example.com"


def _closed_port() -> int:
    """A port nothing listens on: bound by the system, then released (not port 9 by luck)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait(what, check, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _ask(world, amount=1):
    return request_services.submit_capacity_request(
        actor=world.member,
        tenant=world.tenant,
        items={world.rc.slug: amount},
        ends_at=timezone.now() + timedelta(days=3),
        justification="notify tests",
    )


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_an_ask_and_its_decision_reach_the_people_and_channels_through_a_worker(
    world, receiver, fast_retries
):
    world.admin.email = "platform@example.com"
    world.admin.save()
    world.member.email = "member@example.com"
    world.member.save()
    team_hook, secret = channel_services.create_channel(
        actor=world.owner,
        tenant=world.tenant,
        kind="webhook",
        name="team hook",
        target=f"{receiver.url}/team",
    )
    channel_services.create_channel(
        actor=world.admin, tenant=None, kind="slack", name="ops", target=f"{receiver.url}/slack"
    )
    # Another team's channel hears nothing of team-a.
    channel_services.create_channel(
        actor=world.outsider,
        tenant=world.other_tenant,
        kind="webhook",
        name="b",
        target=f"{receiver.url}/other",
    )
    receiver.statuses["/team"] = deque([503])  # its first call fails: retried after backoff

    with celery_worker(["notify"], concurrency=2):
        request = _ask(world)  # no envelope: it waits for a platform admin
        calls = receiver.wait_for(3)
        approval_services.approve_capacity_request(actor=world.admin, request=request, comment="go")
        calls = receiver.wait_for(4)
        _wait("the e-mails", lambda: len(mail.outbox) == 2)
        _wait(
            "every delivery sent",
            lambda: not NotificationDelivery.objects.exclude(state=State.SENT).exists(),
        )

    paths = sorted(c.path for c in calls)
    assert paths == ["/slack", "/team", "/team", "/team"]  # one /team was the 503, retried
    team_calls = [c for c in calls if c.path == "/team"]
    for call in team_calls:
        assert signing.verify(secret, call.body, call.headers["X-Portal-Signature-256"])
    events = [c.json()["event"] for c in team_calls]
    assert sorted(events) == [
        "capacity_request.decided",
        "capacity_request.submitted",
        "capacity_request.submitted",
    ]
    # The retry sent the same delivery (its id lets a receiver drop a duplicate).
    submitted = [c.json()["delivery"] for c in team_calls if "submitted" in c.json()["event"]]
    assert submitted[0] == submitted[1]
    slack = next(c for c in calls if c.path == "/slack").json()
    assert (
        "asks for capacity" in slack["text"]
        and "https://portal.example.com/requests/" in (slack["text"])
    )
    assert {tuple(m.to) for m in mail.outbox} == {
        ("platform@example.com",),
        ("member@example.com",),
    }
    retried = NotificationDelivery.objects.get(pk=submitted[0])
    assert retried.attempts == 2 and retried.response_status == 200
    assert NotificationDelivery.objects.filter(channel=team_hook).count() == 2


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_refusing_receiver_fails_at_once_and_a_dead_one_after_the_last_try(
    world, receiver, fast_retries
):
    refusing, _ = channel_services.create_channel(
        actor=world.owner, tenant=world.tenant, kind="slack", name="r", target=f"{receiver.url}/r"
    )
    dead, _ = channel_services.create_channel(
        actor=world.owner,
        tenant=world.tenant,
        kind="webhook",
        name="d",
        target=f"http://127.0.0.1:{_closed_port()}/nobody-listens",
    )
    receiver.statuses["/r"] = deque([404])
    with celery_worker(["notify"]):
        with transaction.atomic():
            notify("grant.expired", world.tenant, subject="s", text="t")
        _wait(
            "both to give up",
            lambda: NotificationDelivery.objects.filter(state=State.FAILED).count() == 2,
        )
    gone = NotificationDelivery.objects.get(channel=refusing)
    assert gone.attempts == 1 and "404" in gone.last_error
    down = NotificationDelivery.objects.get(channel=dead)
    assert down.attempts == 3 and down.last_error  # NOTIFY_MAX_ATTEMPTS, with backoff between
    assert len(receiver.received) == 1


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_slow_receiver_never_slows_the_request_that_caused_it(world, receiver, fast_retries):
    """The receiver holds its answer until the request has been answered: a request that waited
    for it could not return before the delivery timed out, and that first attempt would fail."""
    receiver.hold = threading.Event()
    channel_services.create_channel(
        actor=world.owner, tenant=world.tenant, kind="webhook", name="slow", target=receiver.url
    )
    body = {
        "tenant": "team-a",
        "items": {world.rc.slug: 1},
        "ends_at": (timezone.now() + timedelta(days=2)).isoformat(),
        "justification": "slow receiver",
    }
    with celery_worker(["notify"]):
        response = session(world.member).post("/api/v1/capacity-requests/", body, format="json")
        assert response.status_code == 201
        assert receiver.received == []  # answered while the receiver had answered nothing
        _wait("the delivery at the receiver, held", lambda: receiver.arrived >= 1)
        receiver.hold.set()
        receiver.wait_for(1)
        _wait(
            "the delivery", lambda: NotificationDelivery.objects.filter(state=State.SENT).exists()
        )
    webhook = NotificationDelivery.objects.filter(state=State.SENT, channel__name="slow")
    assert webhook.count() == 1
    assert webhook.get().attempts == 1  # its first try went through: nothing stood in its way


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_change_sends_nothing(world, fast_retries):
    channel_services.create_channel(
        actor=world.owner, tenant=world.tenant, kind="email", name="m", target="team@example.com"
    )
    with pytest.raises(RuntimeError), transaction.atomic():
        notify("grant.expired", world.tenant, subject="s", text="t")
        raise RuntimeError("the change failed")
    assert not NotificationDelivery.objects.exists()
    assert deliver_due() == 0 and mail.outbox == []


@pytest.mark.django_db
def test_workload_failures_and_gpu_health_reach_the_right_channels(world, fast_retries):
    team, _ = channel_services.create_channel(
        actor=world.owner, tenant=world.tenant, kind="email", name="t", target="team@example.com"
    )
    platform, _ = channel_services.create_channel(
        actor=world.admin, tenant=None, kind="email", name="p", target="ops@example.com"
    )
    world.member.email = "member@example.com"
    world.member.save()
    grant_services.grant_quota(
        actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=1
    )
    workload = workloads.submit_workload(
        actor=world.member,
        tenant=world.tenant,
        spec=workload_spec(
            name="train-1",
            kind="job",
            image="busybox:1.36",
            resources={world.rc.slug: 1},
            priority="gpu-low",
        ),
    )
    change_state(workload.pk, Observation(Workload.State.FAILED, "BackoffLimitExceeded", "exit 1"))
    failed = NotificationDelivery.objects.filter(event="workload.failed")
    assert {(d.channel_id, tuple(d.recipients)) for d in failed} == {
        (None, ("member@example.com",)),
        (team.pk, ()),
    }
    assert "BackoffLimitExceeded: exit 1" in failed.first().text
    # The hook the GPU health checks call: the platform team's channels hear of it.
    with transaction.atomic():
        notify("gpu.health", None, subject="node-1 cordoned", text="XID 79", data={"node": "n1"})
    health = NotificationDelivery.objects.get(event="gpu.health")
    assert health.channel == platform
    assert deliver_due() == 3
    assert sorted(m.to[0] for m in mail.outbox) == [
        "member@example.com",
        "ops@example.com",
        "team@example.com",
    ]


@pytest.mark.django_db
def test_who_manages_channels_and_what_a_channel_accepts(world, settings):
    with pytest.raises(Forbidden):
        channel_services.create_channel(
            actor=world.member, tenant=world.tenant, kind="email", name="m", target="a@b.example"
        )
    with pytest.raises(NotFound):
        channel_services.create_channel(
            actor=world.outsider, tenant=world.tenant, kind="email", name="m", target="a@b.example"
        )
    with pytest.raises(Forbidden):
        channel_services.create_channel(
            actor=world.owner, tenant=None, kind="email", name="m", target="a@b.example"
        )
    settings.NOTIFY_WEBHOOK_ALLOW_HTTP = False
    for kind, target, message in [
        ("webhook", "http://hooks.example.com/x", "https://"),
        ("webhook", "file:///etc/passwd", "https://"),
        ("slack", "https://user:pw@hooks.example.com/x", "no user or password"),
        ("email", "not-an-address", "not an e-mail address"),
        ("webhook", "https://10.0.0.7/hook", "inside the network"),
        ("slack", "https://localhost/hook", "inside the network"),
        ("webhook", "https://[fd00::1]/hook", "inside the network"),
        ("pager", "https://x.example", "unknown kind"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            channel_services.create_channel(
                actor=world.owner, tenant=world.tenant, kind=kind, name="x", target=target
            )
    with pytest.raises(InvalidInput, match="unknown events"):
        channel_services.create_channel(
            actor=world.owner,
            tenant=world.tenant,
            kind="email",
            name="x",
            target="a@b.example",
            events=["everything"],
        )


@pytest.mark.django_db
def test_the_channel_api_shows_the_secret_once_and_stores_it_encrypted(world, settings):
    owner = session(world.owner)
    created = owner.post(
        "/api/v1/notification-channels/",
        {"tenant": "team-a", "kind": "webhook", "name": "ci", "target": "https://h.example/x"},
        format="json",
    )
    assert created.status_code == 201, created.data
    secret = created.data["secret"]
    assert secret.startswith("whsec_")
    row = NotificationChannel.objects.get(pk=created.data["id"])
    assert secret not in str(NotificationChannel.objects.filter(pk=row.pk).values().first())
    assert signing.decrypt_secret(row.secret_encrypted) == secret
    shown = owner.get(f"/api/v1/notification-channels/{row.pk}/")
    assert shown.status_code == 200 and "secret" not in shown.data
    slack = owner.post(
        "/api/v1/notification-channels/",
        {
            "tenant": "team-a",
            "kind": "slack",
            "name": "chat",
            "target": "https://hooks.slack.example/services/T0/B0/SECRETPATH",
        },
        format="json",
    )
    assert slack.status_code == 201 and slack.data["secret"] is None
    listed = session(world.viewer).get("/api/v1/notification-channels/")
    assert listed.status_code == 200 and listed.data["count"] == 2
    assert "SECRETPATH" not in str(listed.data)  # the Slack URL is its credential
    # Members read, only owners (or an admin token) change; another team sees nothing.
    assert (
        session(world.member)
        .post(
            "/api/v1/notification-channels/",
            {"tenant": "team-a", "kind": "email", "name": "x", "target": "a@b.example"},
            format="json",
        )
        .status_code
        == 403
    )
    assert (
        session(world.outsider).get(f"/api/v1/notification-channels/{row.pk}/").status_code == 404
    )
    bad = owner.post(
        "/api/v1/notification-channels/",
        {"tenant": "team-a", "kind": "webhook", "name": "x", "target": "ftp://h.example"},
        format="json",
    )
    assert bad.status_code == 400
    tested = owner.post(f"/api/v1/notification-channels/{row.pk}/test/")
    assert tested.status_code == 202 and tested.data["state"] == "pending"
    log = session(world.viewer).get("/api/v1/notification-deliveries/?tenant=team-a")
    assert log.status_code == 200 and log.data["count"] == 1
    assert session(world.outsider).get("/api/v1/notification-deliveries/").data["count"] == 0
    assert owner.delete(f"/api/v1/notification-channels/{row.pk}/").status_code == 204
    _, read_raw = token_services.issue_token(
        actor=world.owner, user=world.owner, name="r", scopes=["read", "request"]
    )
    refused = bearer(read_raw).post(
        "/api/v1/notification-channels/",
        {"tenant": "team-a", "kind": "email", "name": "x", "target": "a@b.example"},
        format="json",
    )
    assert refused.status_code == 403


@pytest.mark.django_db
def test_the_pages_show_channels_and_the_delivery_log(world, settings):
    owner = Client()
    owner.force_login(world.owner)
    url = f"/teams/{world.tenant.slug}/notifications/"
    added = owner.post(
        url, {"kind": "webhook", "name": "hook", "target": "https://h.example/x", "events": []}
    )
    assert added.status_code == 302 and added.url == url  # a reload cannot add it twice
    stored = dict(owner.session.items())  # what the session store holds for the next page
    assert "new_channel_secret" in stored and "whsec_" not in json.dumps(stored)  # sealed
    shown = owner.get(url)
    assert b"whsec_" in shown.content  # shown this once
    assert "no-store" in shown["Cache-Control"]
    assert b"whsec_" not in owner.get(url).content
    owner.post(
        url, {"kind": "slack", "name": "chat", "target": "https://hooks.slack.com/services/T/B/k3y"}
    )
    listed = owner.get(url).content
    assert b"https://hooks.slack.com/\xe2\x80\xa6" in listed  # cut: the URL is the credential
    assert b"k3y" not in listed
    with transaction.atomic():
        notify("grant.expired", world.tenant, subject="quota ended for team-a", text="t")
    page = owner.get(url)
    assert b"quota ended for team-a" in page.content and b"Pending" in page.content
    bad = owner.post(url, {"kind": "webhook", "name": "x", "target": "nope"})
    assert bad.status_code == 400
    viewer = Client()
    viewer.force_login(world.viewer)
    assert b"Add a channel" not in viewer.get(url).content
    forged = viewer.post(url, {"kind": "webhook", "name": "x", "target": "https://h.example/y"})
    assert forged.status_code == 403  # forbidden, and said so
    outsider = Client()
    outsider.force_login(world.outsider)
    assert outsider.get(url).status_code == 404
    assert viewer.get("/platform/notifications/").status_code == 403
    admin = Client()
    admin.force_login(world.admin)
    console = admin.get("/platform/notifications/")
    assert console.status_code == 200 and b"quota ended for team-a" in console.content


@pytest.mark.django_db
def test_a_team_sees_its_own_deliveries_not_the_platform_teams(world):
    world.admin.email = "admin@example.com"
    world.admin.save()
    for owner, name in ((None, "platform-ops"), (world.tenant, "team-chat")):
        NotificationChannel.objects.create(
            tenant=owner, kind="slack", name=name, target="https://hooks.example/x"
        )
    notify("capacity_request.submitted", world.tenant, subject="ask #1", text="waits")
    rows = NotificationDelivery.objects.filter(tenant=world.tenant)
    # the team's rows: both channels, and the mail to the approvers
    assert sorted(r.channel.name if r.channel else "mail" for r in rows) == [
        "mail",
        "platform-ops",
        "team-chat",
    ]
    seen = NotificationDelivery.objects.visible_to(world.member)
    assert [r.channel.name for r in seen] == ["team-chat"]  # no platform channel, no admin mail
    assert NotificationDelivery.objects.visible_to(world.admin).count() == rows.count()
    page = Client()
    page.force_login(world.owner)
    body = page.get(f"/teams/{world.tenant.slug}/notifications/").content.decode()
    assert "team-chat" in body and "platform-ops" not in body
    assert "e-mail to" not in body  # the approvers' mail is not listed
    api = session(world.member).get("/api/v1/notification-deliveries/")
    assert [r["channel"] for r in api.json()["results"]] == ["team-chat"]


def _garbage_receiver():
    """A receiver whose answer is not HTTP (a wrong port, a broken proxy)."""
    import socketserver
    import threading

    class Garbage(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.recv(65536)
            self.request.sendall(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Garbage)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.django_db
def test_a_receiver_that_answers_garbage_is_retried_then_failed_and_the_sweep_goes_on(
    world, fast_retries, receiver
):
    server = _garbage_receiver()
    try:
        port = server.server_address[1]
        for name, target in (("broken", f"http://127.0.0.1:{port}/x"), ("fine", receiver.url)):
            NotificationChannel.objects.create(
                tenant=world.tenant, kind="webhook", name=name, target=target,
                secret_encrypted=signing.encrypt_secret(signing.new_secret()),
            )  # fmt: skip
        with transaction.atomic():
            notify("grant.expired", world.tenant, subject="s", text="t")
        later, tries = timezone.now(), 3  # fast_retries' NOTIFY_MAX_ATTEMPTS
        for _ in range(tries):
            later += timedelta(hours=1)
            deliver_due(now=later)
        broken = NotificationDelivery.objects.get(channel__name="broken")
        fine = NotificationDelivery.objects.get(channel__name="fine")
        assert (broken.state, broken.attempts) == ("failed", tries)
        assert "not HTTP" in broken.last_error
        assert fine.state == "sent" and len(receiver.received) == 1
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.django_db
def test_a_claimed_delivery_is_left_to_its_worker_for_a_lease_from_the_clock(world):
    from tenants.notifications import sending

    with transaction.atomic():
        notify("grant.expired", world.tenant, subject="s", text="t")
    long_ago = timezone.now() - timedelta(days=1)  # a sweep that started long ago
    NotificationDelivery.objects.update(next_attempt_at=long_ago - timedelta(minutes=1))
    row = NotificationDelivery.objects.get()
    claimed = sending._claim(row.pk, long_ago)
    assert claimed is not None and claimed.attempts == 1
    assert claimed.next_attempt_at >= timezone.now() + timedelta(seconds=290)
    assert sending._claim(row.pk, timezone.now()) is None  # another worker leaves it alone


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "target", "message"),
    [
        ("ops\x00", "https://hooks.example/in", "control characters"),
        ("ops", "https://hooks.example/\x00in", "control characters"),
        ("ops", "https://hooks.example/" + "a" * 600, "at most 500 characters"),
        ("o" * 81, "https://hooks.example/in", "at most 80 characters"),
        ("ops", ",".join(f"p{i}@example.com" for i in range(40)), "at most 500 characters"),
    ],
)
def test_a_channel_with_control_characters_or_too_long_is_a_400_and_adds_nothing(
    world, name, target, message
):
    kind = "email" if "@" in target else "webhook"
    with pytest.raises(InvalidInput, match=message):
        channel_services.create_channel(actor=world.owner, tenant=world.tenant, kind=kind,
                                        name=name, target=target)  # fmt: skip
    page = Client()
    page.force_login(world.owner)
    url = f"/teams/{world.tenant.slug}/notifications/"
    answer = page.post(url, {"kind": kind, "name": name, "target": target})
    assert answer.status_code == 400 and message in answer.content.decode()
    api = session(world.owner).post(
        "/api/v1/notification-channels/",
        {"tenant": "team-a", "kind": kind, "name": name, "target": target},
        format="json",
    )
    assert api.status_code == 400
    assert not NotificationChannel.objects.exists()


@pytest.mark.django_db
def test_a_name_that_resolves_inside_is_refused_without_telling_the_team_the_address(
    world, settings, monkeypatch
):
    import socket as socket_module

    real = socket_module.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        return real("10.1.2.3" if host == "db.corp.example" else host, *args, **kwargs)

    monkeypatch.setattr(socket_module, "getaddrinfo", getaddrinfo)
    settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE = False
    channel, _ = channel_services.create_channel(
        actor=world.owner, tenant=world.tenant, kind="webhook", name="in",
        target="https://db.corp.example/hook",
    )  # fmt: skip
    with transaction.atomic():
        notify("grant.expired", world.tenant, subject="s", text="t")
    deliver_due()
    row = NotificationDelivery.objects.get(channel=channel)
    assert row.state == "failed" and "inside the network" in row.last_error
    assert "10.1.2.3" not in row.last_error  # the inside is not the team's to map


@pytest.mark.django_db
def test_people_who_left_get_no_mail(world):
    world.owner.email = "owner@example.com"
    world.owner.save()
    assert world.tenant.owner_emails() == ["owner@example.com"]
    world.owner.is_active = False
    world.owner.save()
    assert world.tenant.owner_emails() == []


@pytest.mark.django_db
def test_a_removed_channel_keeps_its_log_fails_what_waited_and_is_gone_from_lists(world):
    chat, _ = channel_services.create_channel(
        actor=world.owner, tenant=world.tenant, kind="slack", name="chat",
        target="https://hooks.slack.com/services/T/B/k",
    )  # fmt: skip
    hook, _ = channel_services.create_channel(
        actor=world.owner, tenant=world.tenant, kind="webhook", name="hook",
        target="https://hooks.example/in",
    )  # fmt: skip
    NotificationDelivery.objects.create(
        channel=chat, tenant=world.tenant, event="grant.expired", subject="old", text="t",
        state=NotificationDelivery.State.SENT,
    )  # fmt: skip
    with transaction.atomic():
        notify("grant.expiring", world.tenant, subject="waiting", text="t")

    owner = Client()
    owner.force_login(world.owner)
    url = f"/teams/{world.tenant.slug}/notifications/"
    removed = owner.post(f"/notifications/channels/{chat.pk}/remove/", follow=True)
    assert "Channel chat removed." in removed.content.decode()
    chat.refresh_from_db()
    assert not chat.active
    log = NotificationDelivery.objects.filter(channel=chat)
    assert {(d.subject, d.state) for d in log} == {("old", "sent"), ("waiting", "failed")}
    assert log.get(subject="waiting").last_error == "the channel was removed before this was sent"
    page = owner.get(url).content.decode()
    assert "hooks.slack.com" not in page.split('id="log-h"')[0]  # not among the channels
    assert "waiting" in page  # the log still shows what was meant for it

    api = session(world.owner)
    assert api.delete(f"/api/v1/notification-channels/{hook.pk}/").status_code == 204
    hook.refresh_from_db()
    assert not hook.active and hook.secret_encrypted == ""  # no signing key kept for nothing
    listed = api.get("/api/v1/notification-channels/").json()["results"]
    assert listed == []
    assert api.delete(f"/api/v1/notification-channels/{hook.pk}/").status_code == 404
    assert owner.post(f"/notifications/channels/{hook.pk}/test/").status_code == 404
    assert AuditEvent.objects.filter(verb="notification_channel.removed").count() == 2


@pytest.mark.django_db
def test_a_channel_is_renamed_repointed_and_given_events_and_a_webhook_keeps_its_secret(world):
    hook, secret = channel_services.create_channel(
        actor=world.owner, tenant=world.tenant, kind="webhook", name="hook",
        target="https://hooks.example/in",
    )  # fmt: skip
    sealed = hook.secret_encrypted
    owner = Client()
    owner.force_login(world.owner)
    saved = owner.post(
        f"/notifications/channels/{hook.pk}/edit/",
        {"name": "ml-hook", "events": ["grant.expiring", "workload.failed"]},
        follow=True,
    )
    assert "Channel ml-hook saved." in saved.content.decode()
    hook.refresh_from_db()
    assert (hook.name, hook.events) == ("ml-hook", ["grant.expiring", "workload.failed"])
    assert hook.secret_encrypted == sealed and signing.decrypt_secret(sealed) == secret

    api = session(world.owner)
    url = f"/api/v1/notification-channels/{hook.pk}/"
    moved = api.patch(url, {"target": "https://hooks.example/v2", "events": []}, format="json")
    assert moved.status_code == 200, moved.data
    assert moved.data["target"] == "https://hooks.example/v2" and moved.data["events"] == []
    bad = api.patch(url, {"events": ["no.such.event"]}, format="json")
    assert bad.status_code == 400
    inside = api.patch(url, {"target": "https://10.0.0.5/x"}, format="json")
    assert inside.status_code == 400 and "inside the network" in str(inside.data)
    viewer = session(world.viewer).patch(url, {"name": "mine"}, format="json")
    assert viewer.status_code == 403
    outsider = session(world.outsider).patch(url, {"name": "mine"}, format="json")
    assert outsider.status_code == 404
    hook.refresh_from_db()
    assert (hook.name, hook.target) == ("ml-hook", "https://hooks.example/v2")
    changes = AuditEvent.objects.filter(verb="notification_channel.changed").order_by("id")
    assert [e.after["name"] for e in changes] == ["ml-hook", "ml-hook"]
    assert changes[0].before["name"] == "hook"
    unchanged = api.patch(url, {"name": "ml-hook"}, format="json")
    assert unchanged.status_code == 200 and changes.count() == 2  # nothing to record


# --- the channel form (issue 35, 10) -------------------------------------------------------------


@pytest.mark.django_db
def test_a_refused_channel_keeps_what_was_typed_and_says_why_at_the_field(world):
    owner = Client()
    owner.force_login(world.owner)
    url = f"/teams/{world.tenant.slug}/notifications/"
    answer = owner.post(
        url,
        {
            "kind": "email",
            "name": "ml-oncall",
            "target": "not-an-address",
            "events": ["grant.expired"],
        },
    )
    html = answer.content.decode()
    assert answer.status_code == 400
    assert 'value="ml-oncall"' in html and 'value="not-an-address"' in html
    assert re.search(r'value="grant.expired" id="id_events_\d+" checked>', html)
    error = html.split('id="id_target_error">', 1)[1].split("</div>", 1)[0]
    assert "&#x27;not-an-address&#x27; is not an e-mail address" in error
    assert '<p class="error"' not in html and 'class="messages"' not in html  # no banner
    assert not NotificationChannel.objects.exists()


@pytest.mark.django_db
def test_the_address_example_fits_the_kind_and_events_read_as_words(world):
    owner = Client()
    owner.force_login(world.owner)
    url = f"/teams/{world.tenant.slug}/notifications/"
    page = owner.get(url).content.decode()
    assert 'placeholder="ops@example.com, oncall@example.com"' in page  # e-mail comes first
    assert "A team used its whole monthly budget" in page
    assert ">budget.reached_100<" not in page and "> budget.reached_100" not in page
    hook = owner.post(url, {"kind": "webhook", "name": "x", "target": "ftp://nope"})
    assert 'placeholder="https://hooks.example.com/gpu-portal"' in hook.content.decode()
    channel_services.create_channel(
        actor=world.owner, tenant=world.tenant, kind="email", name="ops",
        target="ops@example.com", events=["budget.reached_100", "grant.expired"],
    )  # fmt: skip
    listed = owner.get(url).content.decode().split('id="log-h"')[0]
    assert "A team used its whole monthly budget; A grant ended" in listed


@pytest.mark.django_db
def test_a_refused_edit_reopens_its_row_with_what_was_typed_and_the_error_by_the_name(world):
    hook, _ = channel_services.create_channel(
        actor=world.owner, tenant=world.tenant, kind="webhook", name="hook",
        target="https://hooks.example/in",
    )  # fmt: skip
    owner = Client()
    owner.force_login(world.owner)
    answer = owner.post(
        f"/notifications/channels/{hook.pk}/edit/",
        {"name": "x" * 81, "events": ["grant.expired"]},
    )
    html = answer.content.decode()
    assert answer.status_code == 400
    row = html.split(f'id="edit-{hook.pk}"')[0].rsplit("<details", 1)[1]
    assert row.startswith(" open")
    assert f'value="{"x" * 81}"' in html and 'aria-invalid="true"' in html
    error = html.split(f'id="name-{hook.pk}-error">', 1)[1].split("</div>", 1)[0]
    assert "The name may be at most 80 characters" in error
    assert re.search(r'value="grant.expired" checked> A grant ended', html)
    hook.refresh_from_db()
    assert hook.name == "hook" and hook.events == []
