"""`gpu-portal workspace` against a live portal (its real API on a port, PostgreSQL behind it):
open, list, stop and restart a notebook with a member's token; the API's refusals come back as
its own words with exit 5, and another team's token sees nothing of it."""

import json

import pytest
from click.testing import CliRunner

from cli.main import cli
from tenants.services.grants import grant_quota
from tenants.services.tokens import issue_token
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db(transaction=True)


def run(url, token, *args):
    result = CliRunner().invoke(
        cli, list(args), env={"GPU_PORTAL_URL": url, "GPU_PORTAL_TOKEN": token}
    )
    return result.exit_code, result.stdout, result.stderr


def test_a_member_opens_lists_stops_and_restarts_a_notebook(world, live_server):
    grant_quota(actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=2)
    _, member = issue_token(actor=None, user=world.member, name="m", scopes=["read", "submit"])
    _, outsider = issue_token(actor=None, user=world.outsider, name="o", scopes=["read"])
    url, team = live_server.url, world.tenant.slug
    opening = ("workspace", "open", "--tenant", team, "--name", "eda", "--class", world.rc.slug,
               "--image", "quay.io/jupyter/base-notebook", "--hours", "2.5")  # fmt: skip

    code, out, err = run(url, member, *opening)
    assert code == 0, err
    ws = Workspace.objects.get(tenant=world.tenant, name="eda")
    assert out.strip() == f"workspace {ws.pk} ({team}/eda): starting"
    assert ws.time_limit_s == 9000

    code, out, err = run(url, member, "workspace", "list")
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split()[:4] == ["ID", "TENANT", "NAME", "KIND"]
    assert row.split()[:6] == [str(ws.pk), team, "eda", "jupyter", world.rc.slug, "starting"]
    # the portal's one-click link: it checks the person, then opens the workspace's own origin
    assert row.rstrip().endswith(f"/workspaces/{ws.pk}/open/")

    code, out, err = run(url, member, "workspace", "stop", str(ws.pk))
    assert (code, out.strip()) == (0, f"workspace {ws.pk} ({team}/eda): stopped"), err
    code, _, err = run(url, member, "workspace", "stop", str(ws.pk))
    assert code == 5 and "409 invalid_transition" in err and "hint:" not in err
    code, out, err = run(url, member, "--json", "workspace", "restart", str(ws.pk))
    assert code == 0, err
    assert json.loads(out)["runs"] == 2

    # the API's refusals, word for word; another team sees nothing
    code, out, err = run(url, member, *opening[:-6], "--class", "h100-80gb", *opening[-4:])
    assert code == 5 and out == ""
    assert f"{team} has no grant for 'h100-80gb'" in err
    code, out, err = run(url, outsider, "workspace", "list")
    assert (code, out.strip()) == (0, "no workspaces"), err
    code, _, err = run(url, outsider, "workspace", "show", str(ws.pk))
    assert code == 5 and "404 " in err
