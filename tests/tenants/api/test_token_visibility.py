"""One rule for who sees which API tokens, the same on the tokens page and in the API (list,
detail, revoke): your own, and those of the CI robot of every tenant you own; platform admins
see all. It is exactly what `token_services.revoke_token` lets you revoke, so what you see you may
revoke, and what you may not revoke you never see."""

from dataclasses import dataclass

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse

from core.errors import Forbidden, NotFound
from tenants.models import ApiToken, Membership
from tenants.services import tenants as tenant_services
from tenants.services import tokens as token_services
from tests.portal.api.conftest import bearer, session

pytestmark = pytest.mark.django_db

PEOPLE = ("owner", "member", "viewer", "outsider", "admin")


@dataclass
class TokenWorld:
    world: object
    tokens: dict[str, ApiToken]  # label -> token
    raw: dict[str, str]  # label -> secret, for the people's own tokens
    robot_tenant: object


@pytest.fixture
def tw(world) -> TokenWorld:
    """team-r: owner owns it, member and viewer are in it; its robot has a token. team-s:
    outsider owns it; its robot has a token. Everyone has a token of their own."""
    robot_tenant = tenant_services.create_tenant(actor=world.admin, slug="team-r", name="R")
    for user, role in ((world.owner, "owner"), (world.member, "member"), (world.viewer, "viewer")):
        tenant_services.add_member(
            actor=world.admin, tenant=robot_tenant, username=user.username, role=role
        )
    other_robot_tenant = tenant_services.create_tenant(actor=world.admin, slug="team-s", name="S")
    tenant_services.add_member(
        actor=world.admin, tenant=other_robot_tenant, username="outsider", role="owner"
    )
    tokens, raw = {}, {}
    for who in PEOPLE:
        user = getattr(world, who)
        tokens[who], raw[who] = token_services.issue_token(
            actor=user, user=user, name=f"{who}-own", scopes=["read"]
        )
    tokens["robot-r"], _ = token_services.issue_token(
        actor=world.owner, user=robot_tenant.robot, name="ci-r", scopes=["submit"]
    )
    tokens["robot-s"], _ = token_services.issue_token(
        actor=world.outsider, user=other_robot_tenant.robot, name="ci-s", scopes=["submit"]
    )
    return TokenWorld(world=world, tokens=tokens, raw=raw, robot_tenant=robot_tenant)


EXPECTED = {
    "owner": {"owner", "robot-r"},
    "member": {"member"},  # a member never sees the robot's tokens
    "viewer": {"viewer"},
    "outsider": {"outsider", "robot-s"},  # another team's owner never sees robot-r's
    "admin": {"owner", "member", "viewer", "outsider", "admin", "robot-r", "robot-s"},
}


def labels(tw: TokenWorld, pks) -> set[str]:
    by_pk = {t.pk: label for label, t in tw.tokens.items()}
    return {by_pk[pk] for pk in pks}


def page_list(user) -> tuple[set[int], str]:
    client = Client()
    client.force_login(user)
    response = client.get(reverse("tenants:tokens"))
    assert response.status_code == 200
    return {t.pk for t in response.context["tokens"]}, response.content.decode()


def api_list(client) -> set[int]:
    response = client.get("/api/v1/tokens/")
    assert response.status_code == 200, response.data
    assert response.data["next"] is None  # one page holds them all
    return {row["id"] for row in response.data["results"]}


def revoke_permitted(user, token: ApiToken) -> bool:
    """What the revoke service allows, tried and rolled back."""
    try:
        with transaction.atomic():
            token_services.revoke_token(actor=user, token=token)
            transaction.set_rollback(True)
    except (Forbidden, NotFound):
        return False
    return True


@pytest.mark.parametrize("who", PEOPLE)
def test_the_page_and_the_api_list_exactly_the_same_tokens(tw, who):
    user = getattr(tw.world, who)
    on_page, body = page_list(user)
    by_session = api_list(session(user))
    by_token = api_list(bearer(tw.raw[who]))
    assert labels(tw, on_page) == labels(tw, by_session) == labels(tw, by_token) == EXPECTED[who]
    assert (
        labels(tw, ApiToken.objects.visible_to(user).values_list("pk", flat=True))
        == (EXPECTED[who])
    )
    for label, token in tw.tokens.items():
        visible = label in EXPECTED[who]
        assert (f"{token.prefix}…" in body) == visible, label
        detail = session(user).get(f"/api/v1/tokens/{token.pk}/")
        assert detail.status_code == (200 if visible else 404), label


@pytest.mark.parametrize("who", PEOPLE)
def test_what_you_see_is_what_revoke_token_lets_you_revoke(tw, who):
    user = getattr(tw.world, who)
    for label, token in tw.tokens.items():
        assert revoke_permitted(user, token) == (label in EXPECTED[who]), label


@pytest.mark.parametrize("who", PEOPLE)
def test_revoking_on_the_page_follows_the_rule(tw, who):
    user = getattr(tw.world, who)
    client = Client()
    client.force_login(user)
    for label, token in tw.tokens.items():
        response = client.post(reverse("tenants:token_revoke", args=[token.pk]))
        token.refresh_from_db()
        if label in EXPECTED[who]:
            assert response.status_code == 302 and token.revoked_at is not None, label
        else:
            assert response.status_code == 404 and token.revoked_at is None, label


@pytest.mark.parametrize("who", PEOPLE)
def test_revoking_through_the_api_follows_the_rule(tw, who):
    user = getattr(tw.world, who)
    client = session(user)
    for label, token in tw.tokens.items():
        response = client.post(f"/api/v1/tokens/{token.pk}/revoke/")
        token.refresh_from_db()
        if label in EXPECTED[who]:
            assert response.status_code == 200 and token.revoked_at is not None, label
        else:
            assert response.status_code == 404 and token.revoked_at is None, label


def test_a_token_still_revokes_only_itself(tw):
    """The owner's token sees the robot's token, but a token may revoke only itself."""
    client = bearer(tw.raw["owner"])
    robot_token = tw.tokens["robot-r"]
    assert client.get(f"/api/v1/tokens/{robot_token.pk}/").status_code == 200
    assert client.post(f"/api/v1/tokens/{robot_token.pk}/revoke/").status_code == 404
    robot_token.refresh_from_db()
    assert robot_token.revoked_at is None


def test_the_robots_tokens_follow_ownership(tw):
    """Promote the member and demote the owner: the robot's tokens move with the role."""
    world, robot_token = tw.world, tw.tokens["robot-r"]
    memberships = Membership.objects.filter(tenant=tw.robot_tenant)
    tenant_services.change_member_role(
        actor=world.admin, membership=memberships.get(user=world.member), role="owner"
    )
    tenant_services.change_member_role(
        actor=world.admin, membership=memberships.get(user=world.owner), role="member"
    )
    assert robot_token.pk in api_list(session(world.member))
    assert robot_token.pk in page_list(world.member)[0]
    assert robot_token.pk not in api_list(session(world.owner))
    assert robot_token.pk not in page_list(world.owner)[0]
