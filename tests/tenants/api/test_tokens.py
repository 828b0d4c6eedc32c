"""Tokens: shown once, stored hashed, scoped, expiring, revocable; the issue_token command."""

import hashlib
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from core.errors import Forbidden, InvalidInput
from tenants.models import ApiToken, AuditEvent
from tenants.services import tenants as tenant_services
from tenants.services import tokens as token_services
from tests.portal.api.conftest import bearer, session

pytestmark = pytest.mark.django_db


def test_a_token_is_shown_once_and_stored_as_a_hash(world):
    client = session(world.member)
    response = client.post(
        "/api/v1/tokens/", {"name": "ci", "scopes": ["read", "submit"]}, format="json"
    )
    assert response.status_code == 201
    raw = response.data["token"]
    token = ApiToken.objects.get(pk=response.data["id"])
    assert raw.startswith("gpp_") and token.prefix == raw[:12]
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in str(ApiToken.objects.filter(pk=token.pk).values().first())
    shown = client.get(f"/api/v1/tokens/{token.pk}/")
    assert "token" not in shown.data and shown.data["prefix"] == token.prefix
    assert AuditEvent.objects.filter(verb="api_token.issued", object_id=str(token.pk)).exists()
    assert bearer(raw).get("/api/v1/tenants/").status_code == 200


def test_tokens_cannot_mint_tokens_but_may_revoke_themselves(world):
    _, raw = token_services.issue_token(
        actor=world.member, user=world.member, name="x", scopes=["read"]
    )
    client = bearer(raw)
    assert client.post("/api/v1/tokens/", {"name": "y", "scopes": ["read"]}).status_code == 403
    token = ApiToken.objects.get(name="x")
    assert client.post(f"/api/v1/tokens/{token.pk}/revoke/").status_code == 200
    assert client.get("/api/v1/tenants/").status_code == 401
    assert AuditEvent.objects.filter(verb="api_token.revoked").count() == 1


def test_approve_scope_is_for_platform_admins_only(world):
    with pytest.raises(InvalidInput, match="approve"):
        token_services.issue_token(
            actor=world.member, user=world.member, name="x", scopes=["approve"]
        )
    token, _ = token_services.issue_token(
        actor=world.admin, user=world.admin, name="x", scopes=["approve", "read"]
    )
    assert token.scopes == ["approve", "read"]


def test_owners_issue_tokens_for_their_robot_and_nobody_else(world):
    robot = tenant_services.create_tenant(actor=world.admin, slug="team-r", name="R").robot
    with pytest.raises(Forbidden):
        token_services.issue_token(actor=world.member, user=world.owner, name="x", scopes=["read"])
    tenant_services.add_member(
        actor=world.admin, tenant=robot.robot_of, username=world.owner.username, role="owner"
    )
    token, _ = token_services.issue_token(
        actor=world.owner, user=robot, name="ci", scopes=["submit"]
    )
    assert token.user == robot
    response = session(world.owner).post(
        "/api/v1/tokens/",
        {"name": "ci2", "scopes": ["read"], "username": robot.username},
        format="json",
    )
    assert response.status_code == 201


def test_an_approve_token_can_approve_and_a_submit_token_cannot(api, world):
    _, admin_raw = token_services.issue_token(
        actor=world.admin, user=world.admin, name="a", scopes=["read", "approve"]
    )
    url = f"/api/v1/capacity-requests/{api.request.pk}/approve/"
    assert bearer(api.raw["all"]).post(url, {}, format="json").status_code == 403
    response = bearer(admin_raw).post(url, {"comment": "ok"}, format="json")
    assert response.status_code == 200, response.data
    assert response.data["state"] == "approved"
    again = bearer(admin_raw).post(url, {}, format="json")
    assert again.status_code == 409 and again.data["code"] == "invalid_transition"


def test_issue_token_command(world):
    out, err = StringIO(), StringIO()
    call_command(
        "issue_token",
        "member",
        "--scopes",
        "read,submit",
        "--expires-in",
        "30d",
        stdout=out,
        stderr=err,
    )
    raw = out.getvalue().strip()
    token = token_services.authenticate_token(raw)
    assert token is not None and token.scopes == ["read", "submit"]
    assert abs(token.expires_at - timezone.now() - timedelta(days=30)) < timedelta(minutes=1)
    assert "shown only now" in err.getvalue()
    with pytest.raises(CommandError, match="no user"):
        call_command("issue_token", "nobody", stdout=out, stderr=err)
    with pytest.raises(CommandError, match="use e.g."):
        call_command("issue_token", "member", "--expires-in", "soon", stdout=out, stderr=err)
    with pytest.raises(CommandError, match="unknown scopes"):
        call_command("issue_token", "member", "--scopes", "root", stdout=out, stderr=err)
