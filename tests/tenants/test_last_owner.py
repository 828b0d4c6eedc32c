"""A team keeps an owner who can sign in (issue 49, 9): its last one may neither leave nor step
down, in the services, on the team page (not offered; refused before the confirm page) and in
the API (400 `last_owner`), each saying what to do instead."""

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from playwright.sync_api import expect

from core.errors import InvalidInput
from tenants.models import Membership
from tenants.services import tenants as tenant_services
from tests.portal.api.conftest import session
from tests.portal.test_browser_ux import (  # noqa: F401 (fixture)
    DESKTOP,
    PHONE,
    assert_accessible,
    no_sideways_scroll,
    people,
    sign_in,
)
from tests.tenants.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

WHAT_TO_DO = "make another member owner first"


@pytest.fixture
def owner(world) -> Membership:
    return Membership.objects.get(user=world.owner, tenant=world.tenant)


@pytest.fixture
def gone_owner(world) -> Membership:
    """A second owner whose account is deactivated: no one to hand the team to."""
    return MembershipFactory(
        tenant=world.tenant,
        role=Membership.Role.OWNER,
        user=UserFactory(username="left-the-company", is_active=False),
    )


def test_the_last_owner_who_can_sign_in_may_neither_leave_nor_step_down(world, owner, gone_owner):
    with pytest.raises(InvalidInput, match=WHAT_TO_DO) as refused:
        tenant_services.remove_member(actor=world.owner, membership=owner)
    assert refused.value.code == "last_owner" and "cannot leave" in refused.value.detail
    with pytest.raises(InvalidInput, match="cannot become member"):
        tenant_services.change_member_role(actor=world.owner, membership=owner, role="member")
    assert Membership.objects.get(pk=owner.pk).role == Membership.Role.OWNER


def test_with_a_second_owner_the_first_may_leave(world, owner):
    MembershipFactory(tenant=world.tenant, role=Membership.Role.OWNER, user=UserFactory())
    tenant_services.remove_member(actor=world.owner, membership=owner)
    assert not Membership.objects.filter(pk=owner.pk).exists()


def test_the_api_refuses_with_a_stable_code_and_what_to_do(world, owner, gone_owner):
    client = session(world.owner)
    response = client.delete(f"/api/v1/members/{owner.pk}/")
    assert response.status_code == 400
    assert response.json()["code"] == "last_owner" and WHAT_TO_DO in response.json()["detail"]
    response = client.patch(f"/api/v1/members/{owner.pk}/", {"role": "viewer"}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "last_owner"
    assert response.json()["errors"]["role"]


def test_the_team_page_offers_the_last_owner_neither_and_says_why(world, owner, gone_owner):
    client = Client()
    client.force_login(world.owner)
    page = client.get("/teams/team-a/").content.decode()
    assert f'href="/teams/team-a/members/{owner.pk}/remove/"' not in page
    assert f'id="role-{owner.pk}"' not in page
    assert "make another member owner before you leave or step down" in page
    # the others' rows keep their controls
    member = Membership.objects.get(user=world.member)
    assert f'href="/teams/team-a/members/{member.pk}/remove/"' in page


def test_the_confirm_page_is_not_shown_to_the_last_owner(world, owner):
    client = Client()
    client.force_login(world.owner)
    response = client.get(f"/teams/team-a/members/{owner.pk}/remove/")
    assert response.status_code == 302 and response["Location"] == "/teams/team-a/"
    said = [str(m) for m in get_messages(response.wsgi_request)]
    assert any(WHAT_TO_DO in line for line in said), said


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_the_last_owner_reads_why_on_the_team_page(live_server, browser, people, viewport):  # noqa: F811
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "owner")
    page.goto(f"{live_server.url}/teams/team-a/")
    note = page.locator(".last-owner")
    expect(note).to_have_text(
        "The last owner: make another member owner before you leave or step down."
    )
    expect(page.get_by_role("link", name="Remove owner")).to_have_count(0)
    expect(page.get_by_role("link", name="Remove member")).to_have_count(1)
    assert no_sideways_scroll(page)
    assert_accessible(page)
