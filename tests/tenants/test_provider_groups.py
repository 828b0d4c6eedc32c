"""Teams and roles from the identity provider's groups: the pure mapping, and its application
at sign-in on PostgreSQL (provider memberships follow the claim; local ones stay; audited)."""

import pytest

from core.permissions import is_platform_admin
from tenants.group_mapping import (
    Change,
    MappingError,
    desired_from_groups,
    membership_changes,
    parse_mapping,
)
from tenants.models import AuditEvent, Membership
from tenants.services import provider_groups as provider_group_services
from tenants.services import tenants as tenant_services
from tenants.services import tokens as token_services
from tests.tenants.factories import UserFactory

PATTERN = r"gpu-(?P<tenant>[a-z0-9-]+)-(?P<role>owner|member|viewer)"


def test_a_map_and_a_pattern_give_each_tenant_its_strongest_role():
    mapping = parse_mapping(
        {"vision-leads": "team-vision:owner", "all-ml": ["team-a:viewer", "team-b:viewer"]},
        PATTERN,
        ["gpu-platform"],
    )
    desired = desired_from_groups(
        ["all-ml", "gpu-team-a-member", "vision-leads", "coffee-club", "gpu-platform", 7],
        mapping,
    )
    assert desired.roles == {"team-a": "member", "team-b": "viewer", "team-vision": "owner"}
    assert desired.platform_admin
    assert desired.unmatched == ("coffee-club",)
    # A claim that is not a list asserts nothing; a single string is one group.
    assert desired_from_groups(None, mapping).roles == {}
    assert desired_from_groups("gpu-team-a-owner", mapping).roles == {"team-a": "owner"}
    assert not desired_from_groups(["gpu-team-a-admin"], mapping).roles  # not a role


@pytest.mark.parametrize(
    ("group_map", "pattern", "message"),
    [
        ({"g": "team-a"}, "", "tenant-slug:role"),
        ({"g": "team-a:boss"}, "", "tenant-slug:role"),
        ({}, "gpu-(", "not a regex"),
        ({}, "gpu-(?P<tenant>.+)", "named groups"),
    ],
)
def test_a_malformed_mapping_says_what_to_write(group_map, pattern, message):
    with pytest.raises(MappingError, match=message):
        parse_mapping(group_map, pattern)


def test_changes_follow_the_provider_and_leave_local_memberships_alone():
    changes = membership_changes(
        desired={"a": "owner", "b": "member", "local-team": "viewer", "new": "viewer"},
        provider_held={"a": "member", "b": "member", "gone": "viewer"},
        locally_held=["local-team"],
    )
    assert changes == [
        Change("a", "change", "owner", before="member"),
        Change("new", "add", "viewer"),
        Change("gone", "remove", None, before="viewer"),
    ]


@pytest.fixture
def sso_groups(settings):
    settings.OIDC_GROUPS_CLAIM = "groups"
    settings.OIDC_GROUP_MAP = {"vision-leads": "team-b:owner"}
    settings.OIDC_GROUP_TENANT_PATTERN = PATTERN
    settings.OIDC_PLATFORM_ADMIN_GROUPS = ["gpu-platform"]


@pytest.mark.django_db
def test_each_sign_in_makes_provider_memberships_match_the_claim(world, sso_groups):
    kim = UserFactory(username="kim")
    Membership.objects.create(tenant=world.other_tenant, user=kim, role="viewer")  # local

    said = provider_group_services.apply_provider_groups(
        user=kim, claims={"groups": ["gpu-team-a-member", "vision-leads", "gpu-nowhere-owner"]}
    )
    held = {m.tenant.slug: (m.role, m.source) for m in kim.memberships.select_related("tenant")}
    assert held == {"team-a": ("member", "provider"), "team-b": ("viewer", "local")}
    assert said == ["added to team-a as member"]
    applied = AuditEvent.objects.get(verb="sso.groups_applied")
    assert applied.after["unknown_tenants"] == ["nowhere"]
    added = AuditEvent.objects.get(verb="membership.added", after__user="kim")
    assert added.actor_repr == "system" and added.after["source"] == "provider"

    # Promoted at the provider: promoted here at the next sign-in.
    provider_group_services.apply_provider_groups(user=kim, claims={"groups": ["gpu-team-a-owner"]})
    assert kim.memberships.get(tenant=world.tenant).role == "owner"
    # No longer asserted: removed; the local membership stays.
    provider_group_services.apply_provider_groups(user=kim, claims={"groups": []})
    assert list(kim.memberships.values_list("tenant__slug", "source")) == [("team-b", "local")]
    assert AuditEvent.objects.filter(verb="membership.removed", before__user="kim").count() == 1
    # A missing claim is no groups: providers leave an empty one out (Dex does).
    provider_group_services.apply_provider_groups(
        user=kim, claims={"groups": ["gpu-team-a-member"]}
    )
    provider_group_services.apply_provider_groups(user=kim, claims={"sub": "x"})
    assert not kim.memberships.filter(tenant=world.tenant).exists()


@pytest.mark.django_db
def test_platform_admin_from_the_provider_is_given_and_taken_back(world, sso_groups):
    kim = UserFactory(username="kim")
    provider_group_services.apply_provider_groups(user=kim, claims={"groups": ["gpu-platform"]})
    kim.refresh_from_db()
    assert is_platform_admin(kim)
    provider_group_services.apply_provider_groups(user=kim, claims={"groups": []})
    kim.refresh_from_db()
    assert not is_platform_admin(kim) and not kim.is_staff
    verbs = list(
        AuditEvent.objects.filter(verb__startswith="sso.platform_admin").values_list(
            "verb", flat=True
        )
    )
    assert sorted(verbs) == ["sso.platform_admin_granted", "sso.platform_admin_revoked"]
    # An admin made in the portal is not unmade by the provider's silence.
    provider_group_services.apply_provider_groups(user=world.admin, claims={"groups": []})
    world.admin.refresh_from_db()
    assert is_platform_admin(world.admin)
    # ... nor when the provider said so once and then stops: the portal made it first.
    provider_group_services.apply_provider_groups(
        user=world.admin, claims={"groups": ["gpu-platform"]}
    )
    provider_group_services.apply_provider_groups(user=world.admin, claims={"groups": []})
    world.admin.refresh_from_db()
    assert is_platform_admin(world.admin) and world.admin.is_staff


@pytest.mark.django_db
def test_off_or_misconfigured_mapping_changes_nothing(world, settings, sso_groups):
    kim = UserFactory(username="kim")
    settings.OIDC_GROUP_MAP = {"g": "no-role-here"}
    assert (
        provider_group_services.apply_provider_groups(
            user=kim, claims={"groups": ["gpu-team-a-owner"]}
        )
        == []
    )
    assert AuditEvent.objects.filter(verb="sso.groups_mapping_error").count() == 1
    settings.OIDC_GROUPS_CLAIM = ""
    settings.OIDC_GROUP_MAP = {}
    assert (
        provider_group_services.apply_provider_groups(
            user=kim, claims={"groups": ["gpu-team-a-owner"]}
        )
        == []
    )
    assert not kim.memberships.exists()


@pytest.fixture
def given(world, sso_groups):
    """kim's membership of team-a, from the provider's group gpu-team-a-member."""
    kim = UserFactory(username="kim")
    provider_group_services.apply_provider_groups(
        user=kim, claims={"groups": ["gpu-team-a-member"]}
    )
    return kim.memberships.get(tenant=world.tenant)


@pytest.mark.django_db
def test_a_membership_the_provider_gives_is_changed_at_the_provider_not_in_the_portal(
    world, given, client, settings
):
    from django.urls import reverse

    from core.errors import InvalidTransition
    from tests.portal.api.conftest import bearer

    assert given.follows_provider

    # The service, for the owner: refused (409), nothing changed, nothing audited.
    with pytest.raises(InvalidTransition, match="change their groups there") as refused:
        tenant_services.change_member_role(actor=world.owner, membership=given, role="owner")
    assert refused.value.status == 409
    with pytest.raises(InvalidTransition, match="cannot remove kim in team-a"):
        tenant_services.remove_member(actor=world.owner, membership=given)
    given.refresh_from_db()
    assert (given.role, given.source) == ("member", "provider")
    assert not AuditEvent.objects.filter(verb__in=["membership.changed", "membership.removed"])

    # The team page says where it comes from and offers no change; a forged POST changes nothing.
    client.force_login(world.owner)
    page = client.get(reverse("team_detail", args=["team-a"])).content.decode()
    assert 'Member <small class="muted">· from the identity provider\'s groups' in page
    assert f'id="role-{given.pk}"' not in page
    local = world.member.memberships.get(tenant=world.tenant)
    assert f'id="role-{local.pk}"' in page  # a local one still can
    client.post(reverse("tenants:member_role", args=["team-a", given.pk]), {"role": "owner"})
    confirm = client.get(reverse("tenants:member_remove", args=["team-a", given.pk]), follow=True)
    assert "change their groups there" in confirm.content.decode()
    given.refresh_from_db()
    assert given.role == "member"

    # The API, for a platform admin's automation: 409 with the same words.
    _, raw = token_services.issue_token(
        actor=world.admin, user=world.admin, name="bot", scopes=["admin"]
    )
    answer = bearer(raw).patch(f"/api/v1/members/{given.pk}/", {"role": "viewer"}, format="json")
    assert answer.status_code == 409 and "identity provider" in answer.json()["detail"]
    assert bearer(raw).delete(f"/api/v1/members/{given.pk}/").status_code == 409

    # With group mapping off the provider no longer manages it: the portal's from the change on.
    settings.OIDC_GROUPS_CLAIM = ""
    changed = tenant_services.change_member_role(actor=world.owner, membership=given, role="viewer")
    assert (changed.role, changed.source) == ("viewer", "local")


@pytest.mark.parametrize("group_map", [["team-a:owner"], "team-a:owner", 7])
def test_a_group_map_that_is_not_an_object_says_what_to_write(group_map):
    with pytest.raises(MappingError, match="must be a JSON object"):
        parse_mapping(group_map)


@pytest.mark.django_db
def test_a_malformed_mapping_changes_nothing_binds_nothing_and_leaves_memberships_editable(
    world, given, settings, client
):
    from scheduler.cluster.reconcile.specs import provider_groups_by_tenant

    kim = given.user
    assert provider_groups_by_tenant() == {"team-b": [("vision-leads", "owner")]}

    settings.OIDC_GROUP_MAP = ["vision-leads"]  # a list where an object belongs
    assert (
        provider_group_services.apply_provider_groups(user=kim, claims={"groups": []}) == []
    )  # no 500
    error = AuditEvent.objects.get(verb="sso.groups_mapping_error")
    assert "must be a JSON object" in error.after["error"]
    assert provider_groups_by_tenant() == {}  # no group bound while sign-in applies nothing
    assert not given.follows_provider  # sign-in would not undo a change now: owners may
    changed = tenant_services.change_member_role(actor=world.owner, membership=given, role="viewer")
    assert (changed.role, changed.source) == ("viewer", "local")
    client.force_login(world.admin)
    console = client.get("/console/sso/")
    assert console.status_code == 200 and "must be a JSON object" in console.content.decode()


@pytest.mark.django_db
def test_the_team_page_names_the_groups_bound_in_its_namespace(world, sso_groups, client, settings):
    settings.KUBE_GROUP_PREFIX = "oidc:"
    client.force_login(world.outsider)  # an owner of team-b
    page = client.get("/teams/team-b/").content.decode()
    assert '<p class="muted" id="provider-groups">' in page
    assert "<code>oidc:vision-leads</code> as owner" in page
    client.force_login(world.owner)
    assert 'id="provider-groups"' not in client.get("/teams/team-a/").content.decode()


@pytest.mark.django_db
def test_the_platform_is_told_when_the_provider_takes_a_teams_last_owner(world, sso_groups):
    from django.db import transaction

    from tenants.models import NotificationChannel, NotificationDelivery
    from tests.tenants.factories import TenantFactory

    world.admin.email = "platform@example.com"
    world.admin.save()
    NotificationChannel.objects.create(
        tenant=None, kind="slack", name="platform-chat", target="https://hooks.example/p"
    )
    solo = TenantFactory(slug="solo")
    kim = UserFactory(username="kim")
    with transaction.atomic():
        provider_group_services.apply_provider_groups(
            user=kim, claims={"groups": ["gpu-solo-owner"]}
        )
        provider_group_services.apply_provider_groups(
            user=kim, claims={"groups": ["gpu-solo-member"]}
        )
    lost = AuditEvent.objects.get(verb="tenant.owner_lost")
    assert lost.tenant == solo and lost.after["last_owner"] == "kim"
    told = NotificationDelivery.objects.filter(event="tenant.no_owner", tenant=solo)
    assert {d.channel.name if d.channel else d.recipients[0] for d in told} == {
        "platform-chat",
        "platform@example.com",
    }
    assert "Make someone its owner" in told.first().text
    # a team with another owner left is not a case to tell
    provider_group_services.apply_provider_groups(user=kim, claims={"groups": ["gpu-team-a-owner"]})
    provider_group_services.apply_provider_groups(user=kim, claims={"groups": []})
    assert AuditEvent.objects.filter(verb="tenant.owner_lost").count() == 1
