"""Platform automation by API: the `admin` scope manages tenants, members, pools and policy;
only platform admins hold it, only they mint it; every call is audited with the token's name."""

from decimal import Decimal

import pytest
from django.contrib.auth.models import Group

from catalog.models import Pool
from core.errors import Forbidden, InvalidInput
from tenants.models import AuditEvent, AutoApprovalRule, Membership, Tenant
from tenants.services import tenants as tenant_services
from tenants.services import tokens as token_services
from tests.portal.api.conftest import bearer, session
from tests.tenants.factories import ResourceClassFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_raw(world):
    _, raw = token_services.issue_token(
        actor=world.admin, user=world.admin, name="onboarding-bot", scopes=["admin"]
    )
    return raw


def test_a_script_onboards_a_team_end_to_end(world, admin_raw):
    """The worked example of docs/api.md, call for call."""
    UserFactory(username="alice")
    UserFactory(username="bob")
    rc = ResourceClassFactory(slug="h100-80gb")
    client = bearer(admin_raw)

    created = client.post(
        "/api/v1/tenants/",
        {"slug": "team-vision", "name": "Vision", "cost_centre": "CC-42"},
        format="json",
    )
    assert created.status_code == 201, created.data
    for username, role in (("alice", "owner"), ("bob", "member")):
        added = client.post(
            "/api/v1/members/",
            {"tenant": "team-vision", "username": username, "role": role},
            format="json",
        )
        assert added.status_code == 201, added.data
    edited = client.patch(
        "/api/v1/tenants/team-vision/", {"monthly_budget": "5000.00"}, format="json"
    )
    assert edited.status_code == 200, edited.data
    pool = client.put(
        "/api/v1/pools/h100-80gb/", {"capacity": 16, "overcommit_ratio": "1.25"}, format="json"
    )
    assert pool.status_code == 200, pool.data
    assert pool.data["grantable"] == 20
    rule = client.put(
        "/api/v1/auto-approval-rules/h100-80gb/",
        {"max_amount": 2, "max_duration_hours": 168},
        format="json",
    )
    assert rule.status_code == 200, rule.data
    bob = Membership.objects.get(tenant__slug="team-vision", user__username="bob")
    promoted = client.patch(f"/api/v1/members/{bob.pk}/", {"role": "viewer"}, format="json")
    assert promoted.status_code == 200 and promoted.data["role"] == "viewer"

    tenant = Tenant.objects.get(slug="team-vision")
    assert tenant.monthly_budget == Decimal("5000.00")
    assert Pool.objects.get(resource_class=rc).capacity == 16
    assert AutoApprovalRule.objects.get(resource_class=rc).max_amount == 2
    # Every change is audited, each naming the user and the token it came through.
    verbs = {
        "tenant.created",
        "membership.added",
        "tenant.edited",
        "pool.changed",
        "policy.changed",
        "membership.changed",
    }
    rows = list(AuditEvent.objects.filter(verb__in=verbs).values_list("verb", "actor_repr"))
    assert {verb for verb, _ in rows} == verbs
    assert sum(verb == "membership.added" for verb, _ in rows) == 2  # alice and bob
    assert {actor for _, actor in rows} == {"platform via token 'onboarding-bot'"}  # every row


def test_a_token_without_admin_cannot_manage_members_pools_or_policy(api, world):
    _, owner_raw = token_services.issue_token(
        actor=world.owner, user=world.owner, name="owner-all", scopes=["read", "request", "submit"]
    )
    client = bearer(owner_raw)
    body = {"tenant": "team-a", "username": "outsider", "role": "member"}
    refused = client.post("/api/v1/members/", body, format="json")
    assert refused.status_code == 403
    assert "admin" in refused.data["detail"]
    assert client.put("/api/v1/pools/a100-80gb-mig-3g.40gb/", {"capacity": 1}).status_code == 403
    # Pools and policy are the platform team's: a team's caller sees none of them.
    assert session(world.owner).get("/api/v1/pools/").data["count"] == 0
    assert session(world.admin).get("/api/v1/pools/").data["count"] == 1
    # The owner's browser session still manages the team's members.
    assert session(world.owner).post("/api/v1/members/", body, format="json").status_code == 201


def test_only_platform_admins_hold_and_mint_the_admin_scope(world):
    with pytest.raises(InvalidInput, match="admin scope"):
        token_services.issue_token(actor=world.owner, user=world.owner, name="x", scopes=["admin"])
    robot = (
        world.tenant.robot
        or tenant_services.create_tenant(actor=world.admin, slug="team-r", name="R").robot
    )
    # Not even a platform admin can give it to a tenant's CI robot.
    with pytest.raises(InvalidInput, match="admin scope"):
        token_services.issue_token(actor=world.admin, user=robot, name="x", scopes=["admin"])
    # Through the API: an owner asking for it is refused with a 4xx, not a 500.
    response = session(world.owner).post(
        "/api/v1/tokens/", {"name": "x", "scopes": ["admin"]}, format="json"
    )
    assert response.status_code == 400
    minted = session(world.admin).post(
        "/api/v1/tokens/", {"name": "ops", "scopes": ["admin"]}, format="json"
    )
    assert minted.status_code == 201
    # A second platform admin may be given one by a platform admin; a member may not give one.
    other_admin = UserFactory(username="ops2", is_staff=True)
    other_admin.groups.add(Group.objects.get_or_create(name="platform-admins")[0])
    token_services.issue_token(actor=world.admin, user=other_admin, name="y", scopes=["admin"])
    with pytest.raises(Forbidden):
        token_services.issue_token(actor=world.member, user=other_admin, name="z", scopes=["admin"])


def test_the_admin_scope_lapses_when_its_user_stops_being_a_platform_admin(
    world, admin_raw, settings
):
    # With a token cache the demotion takes effect within its bound; here at once.
    settings.API_TOKEN_CACHE_SECONDS = 0
    client = bearer(admin_raw)
    assert client.put("/api/v1/pools/a100-80gb-mig-3g.40gb/", {"capacity": 3}).status_code == 200
    world.admin.is_superuser = False
    world.admin.is_staff = False
    world.admin.save()
    world.admin.groups.clear()
    refused = client.put("/api/v1/pools/a100-80gb-mig-3g.40gb/", {"capacity": 4})
    assert refused.status_code == 401  # revoked: the token itself is refused
    assert Pool.objects.get(pk=world.pool.pk).capacity == 3
    # void, not asleep: made an admin again, the old token stays revoked
    world.admin.is_superuser = True
    world.admin.save()
    again = client.put("/api/v1/pools/a100-80gb-mig-3g.40gb/", {"capacity": 4})
    assert again.status_code == 401 and Pool.objects.get(pk=world.pool.pk).capacity == 3
    revoked = AuditEvent.objects.get(verb="api_token.revoked")
    assert (
        revoked.actor_repr == "system" and "no longer a platform admin" in revoked.after["reason"]
    )


@pytest.mark.parametrize("how", ["group", "staff", "group_side"])
def test_an_admin_token_is_revoked_whichever_way_its_user_is_demoted(world, how):
    """Single sign-on takes the admin group away and is_staff off; the Django admin edits a
    group's members or the person. Each way revokes the token, cache or not."""
    from django.conf import settings as django_settings

    person = UserFactory(username="ops", is_staff=True)
    admins, _ = Group.objects.get_or_create(name=django_settings.PLATFORM_ADMIN_GROUP)
    person.groups.add(admins)
    token, raw = token_services.issue_token(
        actor=person, user=person, name="ops-bot", scopes=["admin"]
    )
    client = bearer(raw)
    assert client.put("/api/v1/pools/a100-80gb-mig-3g.40gb/", {"capacity": 3}).status_code == 200
    if how == "group":
        person.groups.remove(admins)
    elif how == "staff":
        person.is_staff = False
        person.save(update_fields=["is_staff"])
    else:
        admins.user_set.remove(person)
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert client.put("/api/v1/pools/a100-80gb-mig-3g.40gb/", {"capacity": 4}).status_code == 401
    person.last_login = None
    person.save(update_fields=["last_login"])  # a save that changes no standing revokes nothing
    assert AuditEvent.objects.filter(verb="api_token.revoked").count() == 1


@pytest.mark.parametrize(
    ("url", "body"),
    [
        ("/api/v1/pools/a100-80gb-mig-3g.40gb/", {"capacity": -1}),
        ("/api/v1/pools/a100-80gb-mig-3g.40gb/", {"overcommit_ratio": "lots"}),
        ("/api/v1/pools/no-such-class/", {"capacity": 1}),
        ("/api/v1/auto-approval-rules/a100-80gb-mig-3g.40gb/", {"max_amount": 1}),
        ("/api/v1/auto-approval-rules/no-such-class/", {"max_amount": 1, "max_duration_hours": 1}),
        ("/api/v1/tenants/team-a/", {}),
        ("/api/v1/tenants/team-a/", {"gpu_ceiling": "-3"}),
    ],
)
def test_bad_input_is_a_clear_4xx(world, admin_raw, url, body):
    method = "patch" if "tenants" in url else "put"
    response = getattr(bearer(admin_raw), method)(url, body, format="json")
    assert 400 <= response.status_code < 500, response.data
    # a message that names what to change: the field's own error, or a detail in words
    said = response.data.get("errors") or {}
    detail = str(response.data.get("detail", ""))
    assert said or len(detail.split()) >= 3, response.data
    if said:
        assert all(str(msgs) for msgs in said.values())


def test_session_calls_keep_the_plain_username_in_the_audit(world):
    session(world.admin).patch("/api/v1/tenants/team-a/", {"name": "A team"}, format="json")
    event = AuditEvent.objects.get(verb="tenant.edited")
    assert event.actor_repr == "platform"
