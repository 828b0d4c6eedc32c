"""Issue 51 through the real Django stack: the one-click open with a one-time ticket, the
proxy's exchange and checks (only the proxy may ask), the server's own secret (sealed at rest,
never shown), and sharing (owner-only, audited, at the page and the API)."""

import json
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from scheduler.workloads.models import Workload
from tenants.models import AuditEvent, Membership
from tenants.services.grants import grant_quota
from tests.portal.api.conftest import session
from workspaces import server_secret, sharing, sync
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db
TOKEN = {"HTTP_X_PROXY_TOKEN": "test-proxy-token"}


@pytest.fixture
def running(world):
    """The member's running Jupyter workspace."""
    from tests.scheduler.test_workspaces import open_one

    grant_quota(actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=2)
    ws = open_one(world)
    Workload.objects.filter(pk=ws.run_id).update(state=Workload.State.RUNNING)
    return Workspace.objects.select_related("run", "tenant").get(pk=ws.pk)


def ticket_for(client, person, ws) -> str:
    client.force_login(person)
    response = client.get(reverse("workspaces:workspace_open", args=[ws.pk]))
    assert response.status_code == 302, response.status_code
    place = urlsplit(response["Location"])
    assert (place.scheme, place.netloc, place.path) == (
        "https",
        f"w{ws.pk}.ws.gpu-portal-workspaces.test",
        "/_portal/enter",
    )
    query = parse_qs(place.query)
    assert query["next"] == [f"/ws/{ws.tenant.namespace}/nb/"]
    return query["ticket"][0]


def ask(client, what, body, **headers):
    return client.post(
        reverse(f"workspaces:proxy_{what}"),
        data=json.dumps(body) if not isinstance(body, bytes) else body,
        content_type="application/json",
        **{**TOKEN, **headers},
    )


def test_a_ticket_opens_its_workspace_once_and_the_session_brings_the_servers_secret(
    running, client
):
    world, ws = running.tenant, running
    ticket = ticket_for(client, running.owner, ws)
    client.logout()  # the proxy has no portal session: its token and the ticket are all it has
    entered = ask(client, "enter", {"workspace": ws.pk, "ticket": ticket})
    assert entered.status_code == 200, entered.content
    assert entered["Cache-Control"] == "no-store"
    session_value = entered.json()["session"]
    assert entered.json()["user"] == "member" and entered.json()["max_age"] == 8 * 3600
    # spent: a second use, or use for another workspace, opens nothing
    again = ask(client, "enter", {"workspace": ws.pk, "ticket": ticket})
    assert again.status_code == 403 and "used already" in again.json()["detail"]
    checked = ask(client, "check", {"workspace": ws.pk, "session": session_value})
    assert checked.status_code == 200, checked.content
    secret = server_secret.unseal(Workspace.objects.get(pk=ws.pk).server_secret_sealed)
    assert checked.json() == {
        "user": "member",
        "upstream": f"ws-nb.{world.namespace}.svc:8888",
        "strip_prefix": "",  # Jupyter serves under its base_url
        "headers": {"Authorization": f"token {secret}"},
        "cookies": {},
    }
    other = ask(client, "check", {"workspace": ws.pk + 1, "session": session_value})
    assert other.status_code == 403


def test_only_the_proxy_asks_and_bad_questions_are_4xx_that_say_what_to_change(running, client):
    ws = running
    assert ask(client, "check", {"workspace": ws.pk}, HTTP_X_PROXY_TOKEN="wrong").status_code == 403
    assert client.post(reverse("workspaces:proxy_check"), data={}).status_code == 403
    bad = ask(client, "check", b"{not json")
    assert bad.status_code == 400 and "JSON" in bad.json()["detail"]
    for body in ({}, {"workspace": "7"}, {"workspace": True}, []):
        said = ask(client, "check", body)
        assert said.status_code == 400 and "workspace" in said.json()["detail"], body
    for session_value in (None, "", "x" * 2000, "forged:value", 7):
        said = ask(client, "check", {"workspace": ws.pk, "session": session_value})
        assert said.status_code == 403, session_value
    assert ask(client, "check", {"workspace": 10**9, "session": "x"}).status_code == 403
    assert client.get(reverse("workspaces:proxy_check"), **TOKEN).status_code == 405


def test_old_tickets_and_sessions_open_nothing(running, client, settings):
    ws = running
    ticket = ticket_for(client, running.owner, ws)
    later = timezone.now() + timedelta(seconds=settings.WORKSPACE_TICKET_MAX_AGE_S + 1)
    with time_machine.travel(later):
        stale = ask(client, "enter", {"workspace": ws.pk, "ticket": ticket})
    assert stale.status_code == 403 and "too old" in stale.json()["detail"]
    fresh = ask(client, "enter", {"workspace": ws.pk, "ticket": ticket_for(client, ws.owner, ws)})
    value = fresh.json()["session"]
    later = timezone.now() + timedelta(seconds=settings.WORKSPACE_SESSION_MAX_AGE_S + 1)
    with time_machine.travel(later):
        assert ask(client, "check", {"workspace": ws.pk, "session": value}).status_code == 403


def test_a_share_lets_a_teammate_in_until_it_is_withdrawn_all_audited(running, client):
    ws = running
    world_owner = Membership.objects.get(tenant=ws.tenant, role=Membership.Role.OWNER).user
    client.force_login(world_owner)
    assert client.get(reverse("workspaces:workspace_open", args=[ws.pk])).status_code == 403
    # only the workspace's owner shares it
    client.post(reverse("workspaces:workspace_share", args=[ws.pk]), {"user": "owner"})
    assert not ws.shared_with.exists()
    client.force_login(ws.owner)
    page = client.get(reverse("workspaces:workspace_detail", args=[ws.pk])).content.decode()
    assert "no one: only member opens it" in page and "<option>owner</option>" in page
    assert "<option>viewer</option>" not in page  # viewers never run code in the namespace
    client.post(reverse("workspaces:workspace_share", args=[ws.pk]), {"user": "owner"})
    assert list(ws.shared_with.values_list("username", flat=True)) == ["owner"]
    page = client.get(reverse("workspaces:workspace_detail", args=[ws.pk])).content.decode()
    assert "Stop sharing" in page
    ticket = ticket_for(client, world_owner, ws)
    entered = ask(client, "enter", {"workspace": ws.pk, "ticket": ticket}).json()
    check = {"workspace": ws.pk, "session": entered["session"]}
    assert ask(client, "check", check).status_code == 200
    client.force_login(ws.owner)
    client.post(reverse("workspaces:workspace_unshare", args=[ws.pk]), {"user": "owner"})
    assert not ws.shared_with.exists()
    assert ask(client, "check", check).status_code == 403  # at the proxy's next check
    rows = AuditEvent.objects.filter(object_id=str(ws.pk), verb__startswith="workspace.")
    said = {(r.verb, json.dumps(r.after or r.before)) for r in rows}
    assert ("workspace.shared", '{"user": "owner"}') in said
    assert ("workspace.unshared", '{"user": "owner"}') in said


def test_sharing_refusals_say_what_to_change(running):
    ws = running
    from core.errors import Forbidden, InvalidInput

    for who, error in (("viewer", "not an owner or member"), ("outsider", "not an owner or")):
        with pytest.raises(InvalidInput, match=error):
            sharing.share_workspace(actor=ws.owner, workspace=ws, username=who)
    with pytest.raises(InvalidInput, match="owns"):
        sharing.share_workspace(actor=ws.owner, workspace=ws, username="member")
    with pytest.raises(InvalidInput, match="not shared"):
        sharing.unshare_workspace(actor=ws.owner, workspace=ws, username="owner")
    team_owner = Membership.objects.get(tenant=ws.tenant, role=Membership.Role.OWNER).user
    with pytest.raises(Forbidden, match="only member may share"):
        sharing.share_workspace(actor=team_owner, workspace=ws, username="owner")
    assert not AuditEvent.objects.filter(verb="workspace.shared").exists()


def test_share_and_unshare_by_api(running):
    ws = running
    member = session(ws.owner)
    url = f"/api/v1/workspaces/{ws.pk}/"
    assert member.get(url).data["shared_with"] == []
    shared = member.post(f"{url}share/", {"user": "owner"}, format="json")
    assert shared.status_code == 200 and shared.data["shared_with"] == ["owner"]
    bad = member.post(f"{url}share/", {"user": "viewer"}, format="json")
    assert bad.status_code == 400 and "not an owner or member" in bad.data["detail"]
    assert member.post(f"{url}share/", {}, format="json").status_code == 400
    team_owner = session(Membership.objects.get(tenant=ws.tenant, role="owner").user)
    assert team_owner.post(f"{url}unshare/", {"user": "owner"}, format="json").status_code == 403
    gone = member.post(f"{url}unshare/", {"user": "owner"}, format="json")
    assert gone.status_code == 200 and gone.data["shared_with"] == []


def test_the_servers_secret_is_sealed_at_rest_never_shown_and_written_to_its_secret(
    running, client
):
    ws = running
    secret = server_secret.unseal(ws.server_secret_sealed)
    assert secret and secret not in ws.server_secret_sealed
    client.force_login(ws.owner)
    for url in (
        reverse("workspaces:workspace_detail", args=[ws.pk]),
        f"/api/v1/workspaces/{ws.pk}/",
        reverse("scheduler:workload_detail", args=[ws.run_id]),
        f"/api/v1/workloads/{ws.run_id}/",
    ):
        assert secret not in client.get(url).content.decode(), url
    run_env = Workload.objects.get(pk=ws.run_id).env
    assert run_env["JUPYTER_TOKEN"] == {"secret": "ws-nb-server", "key": "token"}

    class Kube:
        applied: list = []

        def apply(self, manifest):
            assert manifest["kind"] != "Secret"  # never patched: a patch answers with it
            self.applied.append(manifest)

        def create(self, manifest):
            self.applied.append(manifest)

        def delete(self, kind, name, namespace):
            self.applied.append(("delete", kind, name))
            return kind == "Ingress"  # the nginx Ingress of before issue 51 goes

    kube = Kube()
    done = sync.apply_objects(kube, ws.pk)
    assert done == [
        "PersistentVolumeClaim/ws-nb-home",
        "Service/ws-nb",
        "Secret/ws-nb-server",
        "-Ingress/ws-nb",
    ]
    assert kube.applied[-3] == ("delete", "Secret", "ws-nb-server")
    assert kube.applied[-2]["stringData"] == {"token": secret}
    # a workspace from before issue 51 (none sealed) gets one at its next apply
    Workspace.objects.filter(pk=ws.pk).update(server_secret_sealed="")
    sync.apply_objects(kube, ws.pk)
    new = server_secret.unseal(Workspace.objects.get(pk=ws.pk).server_secret_sealed)
    assert new and new != secret and kube.applied[-2]["stringData"] == {"token": new}


def test_the_culling_pass_reads_jupyters_activity_with_the_servers_token(running, monkeypatch):
    """Jupyter's /api/status asks for the token now that the server checks one."""
    from http.server import BaseHTTPRequestHandler

    from tests.scheduler.workspace_proxy_standins import Server
    from workspaces import activity

    secret = server_secret.unseal(running.server_secret_sealed)

    class Status(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            ok = self.headers.get("Authorization") == f"token {secret}"
            body = b'{"last_activity": "2026-03-02T09:00:00Z"}' if ok else b"{}"
            self.send_response(200 if ok else 403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = Server(Status)
    try:
        url = f"http://127.0.0.1:{server.port}/api/status"
        monkeypatch.setattr(activity, "status_url", lambda *args: url)
        seen = activity.HttpActivityReader().last_activity(running)
        assert seen is not None and seen.isoformat() == "2026-03-02T09:00:00+00:00"
        Workspace.objects.filter(pk=running.pk).update(server_secret_sealed="")
        running.refresh_from_db()
        assert activity.HttpActivityReader().last_activity(running) is None  # refused: unknown
    finally:
        server.shutdown()


def test_code_server_gets_its_session_cookie_and_its_path_cut(running, client):
    ws = running
    Workspace.objects.filter(pk=ws.pk).update(
        kind="code-server", server_secret_sealed=server_secret.seal("c0ffee")
    )
    entered = ask(client, "enter", {"workspace": ws.pk, "ticket": ticket_for(client, ws.owner, ws)})
    checked = ask(client, "check", {"workspace": ws.pk, "session": entered.json()["session"]})
    assert checked.json()["cookies"] == {"code-server-session": "c0ffee"}
    assert checked.json()["headers"] == {}
    assert checked.json()["strip_prefix"] == f"/ws/{ws.tenant.namespace}/nb"
