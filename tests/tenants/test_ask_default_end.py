"""The ask form's default end is one the auto-approval policy accepts (issue 49, 9): a small
ask sent as the form comes is approved at once, not sent to review for being open-ended."""

import re

import pytest
from django.test import Client

from tenants.models import AutoApprovalRule, CapacityRequest

pytestmark = pytest.mark.django_db


def _checked_duration(page: str) -> str:
    (value,) = re.findall(r'<input type="radio" name="duration" value="(\w+)"[^>]*checked', page)
    return value


@pytest.fixture
def member(world) -> Client:
    AutoApprovalRule.objects.create(resource_class=world.rc, max_amount=2, max_duration_hours=72)
    client = Client()
    client.force_login(world.member)
    return client


def test_the_form_comes_with_the_longest_end_the_policy_approves(world, member):
    page = member.get("/teams/team-a/ask/").content.decode()
    assert _checked_duration(page) == "3d"  # 72 h: 3 days, not a week, never open-ended
    linked = member.get(f"/teams/team-a/ask/?resource_class={world.rc.pk}").content.decode()
    assert _checked_duration(linked) == "3d"
    assert "<strong>Approved at once</strong> by policy" in linked  # the hint agrees


def test_a_small_ask_sent_as_the_form_comes_is_approved_at_once(world, member):
    page = member.get("/teams/team-a/ask/").content.decode()
    response = member.post(
        "/teams/team-a/ask/",
        {
            "resource_class": world.rc.pk,
            "amount": 1,
            "duration": _checked_duration(page),
            "justification": "a small experiment",
        },
    )
    assert response.status_code == 302
    ask = CapacityRequest.objects.get(tenant=world.tenant)
    assert ask.state == CapacityRequest.State.APPROVED
