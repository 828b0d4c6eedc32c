"""The platform team's day through `gpu-portal admin`, end to end against a live portal (its real
API on a port, PostgreSQL behind it): onboard a team, approve its ask, export its statement; and
every refusal on the way comes back as the API's own message with a non-zero exit status."""

import csv
import io
import json
from datetime import timedelta

import pytest
from click.testing import CliRunner
from django.utils import timezone

from cli.main import cli
from metering import selectors
from tenants.models import (
    AuditEvent,
    CapacityRequest,
    DepartmentEnvelope,
    Membership,
    QuotaGrant,
)
from tenants.services import requests as request_services
from tenants.services.tokens import issue_token
from tests.tenants.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def run(url, token, *args):
    result = CliRunner().invoke(
        cli, list(args), env={"GPU_PORTAL_URL": url, "GPU_PORTAL_TOKEN": token}
    )
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def portal(world, live_server):
    """The platform admin's `admin` token, and two people who have signed in but belong to
    no team yet."""
    for username in ("alice", "bob"):
        UserFactory(username=username)
    _, admin_token = issue_token(
        actor=world.admin, user=world.admin, name="platform-cli", scopes=["admin"]
    )
    return live_server.url, admin_token


def test_the_admin_cli_onboards_a_team_approves_its_ask_and_exports_its_statement(
    portal, world, tmp_path
):
    url, admin = portal
    rc = world.rc.slug

    # 1. onboard: the team with its owner, then one more member
    code, out, err = run(
        url, admin, "admin", "tenants", "create", "team-vision", "--name", "Vision",
        "--cost-centre", "CC-42", "--budget", "5000.00", "--owner", "alice",
    )  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[0].startswith("tenant team-vision created (active, namespace ")
    code, out, err = run(url, admin, "admin", "members", "add", "team-vision", "bob")
    assert (code, out.strip()) == (0, "bob is member of team-vision"), err
    code, out, err = run(
        url, admin, "admin", "members", "list", "--tenant", "team-vision", "--output", "json"
    )
    assert code == 0, err
    # its people, and its CI robot (robot-team-vision) that came with it
    assert {(m["username"], m["role"]) for m in json.loads(out)} == {
        ("alice", "owner"),
        ("bob", "member"),
        ("robot-team-vision", "member"),
    }

    # the refusals are the API's words, exit 5
    code, out, err = run(url, admin, "admin", "tenants", "create", "team-vision", "--name", "Again")
    assert code == 5 and out == ""
    assert err.startswith("error: 400 ") and "team-vision" in err
    code, _, err = run(url, admin, "admin", "members", "add", "team-vision", "nobody")
    assert code == 5 and "no user 'nobody'" in err

    # 2. the team asks (bob's own token), and the platform team approves it
    _, bob = issue_token(actor=None, user=Membership.objects.get(user__username="bob").user,
                         name="bob-cli", scopes=["read", "request"])  # fmt: skip
    until = (timezone.now() + timedelta(days=30)).isoformat()
    code, out, err = run(
        url, bob, "request", "--tenant", "team-vision", "--item", f"{rc}=2", "--until", until,
        "--why", "Q1 fine-tuning",
    )  # fmt: skip
    assert code == 0, err
    ask = CapacityRequest.objects.get(tenant__slug="team-vision")
    assert ask.state == "submitted" and f"request #{ask.pk}: submitted" in out

    code, out, err = run(url, admin, "admin", "approvals", "list")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.split()[0] == str(ask.pk))
    assert row.split()[1:4] == ["team-vision", "bob", f"{rc}=2"]
    code, out, err = run(url, admin, "admin", "approvals", "reject", str(ask.pk))
    assert code == 5
    assert "400 invalid: say why the request is rejected" in err  # a note is required
    code, out, err = run(
        url, admin, "admin", "approvals", "approve", str(ask.pk), "--note", "for Q1"
    )
    assert code == 0, err
    assert out.startswith(f"request #{ask.pk} (team-vision): approved by platform: {rc}=2")
    assert QuotaGrant.objects.get(tenant__slug="team-vision", resource_class=world.rc).amount == 2
    code, _, err = run(url, admin, "admin", "approvals", "approve", str(ask.pk))
    assert code == 5 and "409 invalid_transition" in err

    # 3. its statement and the chargeback export
    month = f"{selectors.current_month():%Y-%m}"  # the billing month
    code, out, err = run(url, admin, "admin", "statements", "show", "team-vision", "-o", "json")
    assert code == 0, err
    statement = json.loads(out)
    assert (statement["tenant"], statement["month"]) == ("team-vision", month)
    assert statement["cost_centre"] == "CC-42" and statement["budget"] == "5000.00"
    code, out, err = run(url, admin, "admin", "statements", "show", "team-vision")
    assert code == 0 and out.startswith(f"team-vision · {month} · basis ")
    assert "total:" in out and "budget:" in out

    target = tmp_path / "vision.csv"
    code, _, err = run(
        url, admin, "admin", "statements", "export", "--tenant", "team-vision", "--month", month,
        "--file", str(target),
    )  # fmt: skip
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(target.read_text(), newline="")))
    assert rows and {(r["tenant"], r["cost_centre"], r["month"]) for r in rows} == {
        ("team-vision", "CC-42", month)
    }
    assert rc in {r["resource_class"] for r in rows}
    code, out, err = run(url, admin, "admin", "statements", "export", "--output", "json")
    assert code == 0, err
    assert "team-vision" in {st["tenant"] for st in json.loads(out)}  # every team's

    code, _, err = run(url, admin, "admin", "statements", "show", "team-vision", "--month", "13")
    assert code == 5 and "400 invalid" in err and "month" in err

    # every change went through the API, audited with the token's name
    verbs = set(
        AuditEvent.objects.filter(actor_repr__contains="platform-cli").values_list(
            "verb", flat=True
        )
    )
    assert {"tenant.created", "membership.added"} <= verbs


def test_admin_commands_refuse_a_token_without_the_admin_scope(portal, world):
    url, _ = portal
    _, reader = issue_token(actor=world.admin, user=world.admin, name="ro", scopes=["read"])
    code, out, err = run(url, reader, "admin", "tenants", "create", "team-x", "--name", "X")
    assert code == 5 and out == ""
    assert "403 permission_denied: this token lacks the scope" in err
    assert "hint: admin commands need a platform admin's token with the admin scope" in err
    _, owner = issue_token(actor=world.owner, user=world.owner, name="o", scopes=["read"])
    code, _, err = run(url, owner, "admin", "pools", "show", world.rc.slug)
    assert code == 5 and "404 not_found" in err  # not a platform admin: the pool is not theirs

    code, _, err = run(url, "gpp_not-a-token", "admin", "approvals", "list")
    assert code == 5 and "401 " in err


def test_queues_and_why_through_the_api(portal, world):
    url, admin = portal
    from scheduler.cluster.models import TenantSyncState

    queue = {
        "queue": "gp-team-a", "pending": 1, "admitted": 2, "active": True, "reason": "",
        "lines": [{"flavor": "a100-80gb", "resource": "gpu-portal.io/gpu-slices", "nominal": 6,
                   "used": 6, "borrowed": 0, "lent": 0}],
    }  # fmt: skip
    TenantSyncState.objects.create(tenant=world.tenant, queue_status=queue)
    code, out, err = run(url, admin, "admin", "queues", "-o", "json")
    assert code == 0, err
    by_slug = {t["slug"]: t for t in json.loads(out)}
    assert by_slug["team-a"]["queue"] == queue and by_slug["team-b"]["queue"] is None
    code, out, err = run(url, admin, "admin", "queues", "team-a")
    assert code == 0, err
    assert out.splitlines()[0] == "team-a: 1 waiting, 2 admitted; admitting: yes"
    assert "nothing waiting" in out

    code, _, err = run(url, admin, "admin", "why", "999999")
    assert code == 5 and "404 not_found" in err


def test_departments_through_the_cli_set_up_by_the_platform_and_decided_by_their_admin(
    portal, world, settings
):
    """The platform team sets a department up; a team's ask then waits for the department's
    admin, who approves it inside the quota with their own token and is refused above it."""
    url, admin = portal
    head = UserFactory(username="head")
    steps = [
        ("create", "research", "--name", "Research", "--budget", "900", "--admins-decide"),
        ("quota", "research", "A100-80GB", "9"),
        ("add-team", "research", world.tenant.slug),
        ("admins", "research", "head"),
        ("envelope", "research", world.rc.slug, "--max-amount", "1", "--max-duration-hours", "48"),
    ]
    for step in steps:
        code, out, err = run(url, admin, "admin", "departments", *step)
        assert code == 0, (step, err)
    code, out, err = run(url, admin, "admin", "departments", "show", "research")
    assert code == 0, err
    assert "quota (held/slices): A100-80GB 0/9" in out and "monthly budget:      900.00" in out
    code, out, err = run(url, admin, "admin", "departments", "list", "-o", "json")
    (shown,) = json.loads(out)
    assert (shown["teams"], shown["admins"], shown["auto_approve"]) == (
        [world.tenant.slug],
        ["head"],
        False,
    )

    settings.BILLING_CURRENCY = "USD"  # the line names it; not this machine's environment
    code, out, err = run(url, admin, "admin", "departments", "spend", "research")
    assert code == 0, err
    month = f"{selectors.current_month():%Y-%m}"  # the billing month; nothing used yet
    assert out.splitlines()[0] == (
        f"research · {month}: 0.00 USD of 900.00 USD (0 %); at this rate the month ends at 0.00 USD"
    )
    assert out.splitlines()[2].split() == [world.tenant.slug, "0.0000", "0.00", "0.00"]

    envelope = DepartmentEnvelope.objects.get(department__slug="research")
    assert (envelope.resource_class, envelope.max_amount, envelope.max_duration_hours) == (
        world.rc,
        1,
        48,
    )

    # refusals are the API's words, exit 5
    code, _, err = run(url, admin, "admin", "departments", "remove-team", "research", "team-b")
    assert code == 5 and "404 " in err and "team-b is not in research" in err
    code, _, err = run(url, admin, "admin", "departments", "quota", "research", "Z9", "7")
    assert code == 5 and "unknown GPU model 'Z9'" in err
    code, _, err = run(url, admin, "admin", "departments", "set", "research")
    assert code == 2 and "nothing to set" in err

    asks = [
        request_services.submit_capacity_request(
            actor=world.member, tenant=world.tenant, items={world.rc.slug: n},
            ends_at=timezone.now() + timedelta(days=7), justification="training",
        )
        for n in (2, 2)
    ]  # fmt: skip
    _, head_token = issue_token(actor=head, user=head, name="head-cli", scopes=["read", "approve"])
    code, out, err = run(url, head_token, "admin", "departments", "asks", "research")
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:]] == [str(a.pk) for a in asks]
    code, out, err = run(
        url, head_token, "admin", "departments", "approve", "research", str(asks[0].pk)
    )
    assert code == 0, err
    assert out.startswith(f"request #{asks[0].pk} ({world.tenant.slug}): approved by head")
    code, _, err = run(
        url, head_token, "admin", "departments", "approve", "research", str(asks[1].pk)
    )  # 12 of 9 slices: a platform admin's decision
    assert code == 5 and "above the department's quota of 9 slices" in err
    assert CapacityRequest.objects.get(pk=asks[1].pk).state == "submitted"
