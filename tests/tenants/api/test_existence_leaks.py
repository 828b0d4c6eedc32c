"""What is not yours to see answers exactly as what does not exist (issue 13): no status code
or message tells a caller that another team's user, robot or tenant exists."""

import pytest

from tenants.models import ApiToken
from tenants.services import tenants as tenant_services
from tests.portal.api.conftest import bearer, session

pytestmark = pytest.mark.django_db


def _answer(response, name: str):
    """Status and body, with the name asked for taken out (the message repeats it)."""
    return response.status_code, str(response.json()).replace(name, "<name>")


def _ask_token_for(client, username: str):
    return client.post(
        "/api/v1/tokens/",
        {"name": "ci", "scopes": ["read"], "username": username},
        format="json",
    )


def test_a_token_for_someone_else_answers_the_same_whether_they_exist_or_not(world):
    robot_c = tenant_services.create_tenant(actor=world.admin, slug="team-c", name="C").robot
    client = session(world.owner)  # owner of team-a only
    missing = _answer(_ask_token_for(client, "nobody-at-all"), "nobody-at-all")
    assert missing[0] == 403, missing
    for someone in ("outsider", robot_c.username, "platform", world.member.username):
        assert _answer(_ask_token_for(client, someone), someone) == missing, someone
    assert not ApiToken.objects.filter(name="ci").exists()


def test_a_member_asking_for_their_own_teams_robot_is_told_which_role_it_takes(world):
    robot = tenant_services.create_tenant(actor=world.admin, slug="team-r", name="R").robot
    tenant_services.add_member(
        actor=world.admin, tenant=robot.robot_of, username=world.member.username, role="member"
    )
    response = _ask_token_for(session(world.member), robot.username)
    assert response.status_code == 403
    assert "owner" in response.json()["detail"]


def test_platform_admins_see_every_user_and_are_told_when_one_is_missing(world):
    response = _ask_token_for(session(world.admin), "nobody-at-all")
    assert response.status_code == 404
    assert response.json()["errors"] == {"username": ["no user 'nobody-at-all'"]}
    assert _ask_token_for(session(world.admin), "outsider").status_code == 201


def test_the_audit_tenant_filter_answers_the_same_for_another_team_and_a_missing_one(api, world):
    client = bearer(api.raw["read"])  # a member of team-a only
    other = client.get("/api/v1/audit-events/", {"tenant": world.other_tenant.slug})
    missing = client.get("/api/v1/audit-events/", {"tenant": "no-such-team"})
    assert _answer(other, world.other_tenant.slug) == _answer(missing, "no-such-team")
    assert other.status_code == 200 and other.json()["count"] == 0
    own = client.get("/api/v1/audit-events/", {"tenant": world.tenant.slug})
    assert own.status_code == 200 and own.json()["count"] >= 1
    assert {e["tenant"] for e in own.json()["results"]} == {world.tenant.slug}
