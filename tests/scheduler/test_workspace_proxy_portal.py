"""Issue 51 end to end without a browser: the real portal (Django's live server, the database,
the shared cache) and the real proxy process in front of a stand-in server that checks the
workspace's own secret. The owner opens it in one click; the portal's session cookie, sent
along by a careless client, never reaches the server; a teammate it is not shared with gets
nowhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.urls import reverse

from scheduler.workloads.models import Workload
from tenants.models import Membership
from tenants.services.grants import grant_quota
from tests.scheduler.workspace_proxy_standins import Server, Upstream, exchange, request
from workspaces import server_secret
from workspaces.models import Workspace

ROOT = Path(__file__).resolve().parents[2]
DOMAIN = "ws.gpu-portal-workspaces.test"  # portal.settings.test


@pytest.fixture
def stack(world, live_server, settings):
    from tests.scheduler.test_workspaces import open_one

    upstream = Server(Upstream)
    settings.WORKSPACE_UPSTREAM = f"127.0.0.1:{upstream.port}"
    grant_quota(actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=2)
    ws = open_one(world)
    Workload.objects.filter(pk=ws.run_id).update(state=Workload.State.RUNNING)
    upstream.state["secret"] = server_secret.unseal(
        Workspace.objects.get(pk=ws.pk).server_secret_sealed
    )
    env = {
        **os.environ,
        "PORTAL_BASE_URL": live_server.url,
        "WORKSPACE_DOMAIN": DOMAIN,
        "WORKSPACE_PROXY_TOKEN": settings.WORKSPACE_PROXY_TOKEN,
        "WORKSPACE_PROXY_HOST": "127.0.0.1",
        "WORKSPACE_PROXY_PORT": "0",
    }
    process = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "workspaces.proxy"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert "listening on" in line, process.stderr.read()
        yield {"port": int(line.rsplit(":", 1)[1]), "ws": ws, "upstream": upstream, "world": world}
    finally:
        process.terminate()
        process.wait(timeout=10)
        upstream.shutdown()


def _enter(stack, client, person) -> tuple[int, str]:
    """The portal's one click for `person`, then the proxy's exchange: (status, cookie)."""
    ws = stack["ws"]
    client.force_login(person)
    opened = client.get(reverse("workspaces:workspace_open", args=[ws.pk]))
    if opened.status_code != 302:
        return opened.status_code, ""
    place = urlsplit(opened["Location"])
    assert place.netloc == f"w{ws.pk}.{DOMAIN}"
    raw = request("GET", place.netloc, f"{place.path}?{place.query}")
    status, headers, _ = exchange(stack["port"], raw)
    cookie = next((v for k, v in headers if k == "Set-Cookie"), "")
    return status, cookie.split(";", 1)[0]


@pytest.mark.django_db(transaction=True)
def test_the_owner_opens_it_and_the_portals_cookie_never_reaches_the_server(stack, client):
    ws, upstream = stack["ws"], stack["upstream"]
    status, cookie = _enter(stack, client, ws.owner)
    assert status == 303 and cookie.startswith("__Host-gpu-portal-ws=")
    portal_session = client.cookies["sessionid"].value
    host = f"w{ws.pk}.{DOMAIN}"
    sent = [("Cookie", f"sessionid={portal_session}; {cookie}")]
    status, _, body = exchange(stack["port"], request("GET", host, "/ws/x/nb/", sent))
    assert status == 200 and body == b"hello from the server"
    (seen,) = upstream.seen
    assert ("Authorization", f"token {upstream.state['secret']}") in seen["headers"]
    assert portal_session not in str(seen["headers"]) and "sessionid" not in seen["cookie"]
    # the cookie names its workspace: on another workspace's host it opens nothing
    other = request("GET", f"w{ws.pk + 1}.{DOMAIN}", "/", [("Cookie", cookie)])
    assert exchange(stack["port"], other)[0] == 403


@pytest.mark.django_db(transaction=True)
def test_a_teammate_it_is_not_shared_with_gets_nowhere(stack, client):
    teammate = Membership.objects.get(tenant=stack["ws"].tenant, role="owner").user
    assert _enter(stack, client, teammate)[0] == 403  # refused at the portal: no ticket
    assert not stack["upstream"].seen
