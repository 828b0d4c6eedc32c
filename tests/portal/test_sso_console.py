"""The console's single sign-on page: the mapping in force, what it names, and a dry run of a
person's groups; platform admins only; any query answers a page, never an error."""

import pytest
from django.urls import reverse

from tenants.services import provider_groups as provider_group_services
from tests.tenants.factories import UserFactory

pytestmark = pytest.mark.django_db

URL = "/console/sso/"


@pytest.fixture
def sso_groups(settings):
    settings.OIDC_GROUPS_CLAIM = "groups"
    settings.OIDC_GROUP_MAP = {"vision-leads": "team-a:owner", "ghosts": "team-zz:member"}
    settings.OIDC_GROUP_TENANT_PATTERN = r"gpu-(?P<tenant>[a-z0-9-]+)-(?P<role>owner|member|viewer)"
    settings.OIDC_PLATFORM_ADMIN_GROUPS = ["gpu-platform"]
    settings.KUBE_GROUP_PREFIX = "oidc:"


def test_only_platform_admins_see_it(client, world):
    assert reverse("console:sso") == URL
    assert client.get(URL).status_code == 302  # to sign in
    client.force_login(world.owner)
    assert client.get(URL).status_code == 403


def test_off_it_says_how_to_turn_it_on(client, world, settings):
    settings.OIDC_GROUPS_CLAIM = ""
    client.force_login(world.admin)
    page = client.get(URL).content.decode()
    assert "Group mapping is off" in page and "OIDC_GROUPS_CLAIM" in page


def test_the_mapping_in_force_and_a_dry_run_of_a_persons_groups(client, world, sso_groups):
    client.force_login(world.admin)
    page = client.get(URL).content.decode()
    assert "<code>vision-leads</code>" in page and "team-a: owner" in page
    assert 'team-zz: member <span class="badge state-failed">no such team</span>' in page
    assert "<code>oidc:&lt;group&gt;</code>" in page  # as the RoleBindings name groups

    tried = client.get(URL, {"groups": "vision-leads, gpu-team-b-viewer\ncoffee-club gpu-platform"})
    outcome = tried.content.decode().split('id="outcome"')[1].split("</section>")[0]
    assert "Owner of <strong>team-a</strong>" in outcome
    assert "Viewer of <strong>team-b</strong>" in outcome
    assert "<strong>Platform admin.</strong>" in outcome
    assert "<code>coffee-club</code>" in outcome  # means nothing here
    # the same mapping applies at sign-in, and the page lists what it did
    kim = UserFactory(username="kim")
    provider_group_services.apply_provider_groups(
        user=kim, claims={"groups": ["vision-leads", "gpu-nope-member"]}
    )
    recent = client.get(URL).content.decode().split('id="recent-h"')[1]
    assert "added to team-a as owner" in recent and "No such team: nope" in recent


def test_a_malformed_mapping_is_shown_not_raised(client, world, sso_groups, settings):
    settings.OIDC_GROUP_MAP = {"g": "team-a:boss"}
    client.force_login(world.admin)
    response = client.get(URL, {"groups": "g"})
    assert response.status_code == 200
    assert "The mapping in settings is malformed" in response.content.decode()
    assert 'id="outcome"' not in response.content.decode()


@pytest.mark.parametrize(
    "query",
    [
        "groups=" + "x" * 50_000,
        "groups=%00%ED%A0%80%FF",
        "groups=,%20,%0A%09",
        "groups=a,b," * 3000,
    ],
)
def test_any_groups_typed_answer_a_page(client, world, sso_groups, query):
    client.force_login(world.admin)
    assert client.get(f"{URL}?{query}").status_code == 200


def test_refused_sign_ins_show_who_and_why(client, world, sso_groups):
    from core import audit

    audit.record(
        actor=None, verb="sso.sign_in_refused", obj=None, tenant=None, object_type="auth.User",
        after={"username": "mallory", "reason": "an account named 'mallory' already exists"},
    )  # fmt: skip
    client.force_login(world.admin)
    recent = client.get(URL).content.decode().split('id="recent-h"')[1]
    assert "<td>mallory</td>" in recent
    assert "Refused: an account named &#x27;mallory&#x27; already exists" in recent
