"""Owners set their own team's budget on its usage page; members cannot; while budgets are
enforced only the platform team raises one. Every refusal says what to do and changes nothing."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from metering.models import Budget
from tenants.models import AuditEvent

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 15, 12, 0, tzinfo=UTC)
NOV = date(2026, 11, 1)


def _set(client, world, **data):
    url = reverse("metering:team_budget", args=[world.tenant.slug])
    return client.post(url, {"month": "2026-11", "amount": "500", **data}, follow=True)


@time_machine.travel(NOW, tick=False)
def test_an_owner_sets_the_teams_budget_from_its_usage_page(client, world):
    client.force_login(world.owner)
    page = client.get(reverse("metering:team_usage", args=[world.tenant.slug])).content.decode()
    assert "Set the budget" in page
    body = _set(client, world).content.decode()
    assert "budget for November 2026 is 500" in body
    assert Budget.objects.get(tenant=world.tenant, month=NOV).amount == Decimal(500)
    assert AuditEvent.objects.filter(verb="budget.set", actor=world.owner).count() == 1


@time_machine.travel(NOW, tick=False)
def test_members_neither_see_the_form_nor_set_a_budget(client, world):
    client.force_login(world.member)
    page = client.get(reverse("metering:team_usage", args=[world.tenant.slug])).content.decode()
    assert "Set the budget" not in page
    assert _set(client, world).status_code == 403
    client.force_login(world.outsider)
    assert _set(client, world).status_code == 404  # another team's: not even there
    assert not Budget.objects.exists()


@time_machine.travel(NOW, tick=False)
@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"month": "2026-10"}, "October 2026 is over: set this month"),
        ({"month": "2026-13"}, "Budget not set:"),
        ({"amount": "abc"}, "Budget not set:"),
        ({"amount": "-5"}, "Budget not set:"),
        # more than the column's 12 digits (10 before the point) can hold: refused, not a 500
        ({"amount": "10000000000"}, "amount must be less than 10,000,000,000"),
        ({"amount": "1e12"}, "amount must be less than 10,000,000,000"),
        ({"amount": "1e308"}, "amount must be less than 10,000,000,000"),
    ],
)
def test_a_budget_that_cannot_be_set_is_refused_with_the_reason(client, world, data, says):
    client.force_login(world.owner)
    response = _set(client, world, **data)
    page = response.content.decode()
    assert response.status_code == 400 and says in page
    assert 'aria-invalid="true"' in page  # at the field
    typed = {"month": "2026-11", "amount": "500", **data}
    assert f'value="{typed["amount"]}"' in page  # what was typed is kept
    assert not Budget.objects.exists()


@time_machine.travel(NOW, tick=False)
def test_with_budgets_enforced_owners_lower_but_only_the_platform_raises(client, world, settings):
    settings.BUDGET_ENFORCE = True
    Budget.objects.create(tenant=world.tenant, month=NOV, amount=Decimal(500))
    client.force_login(world.owner)
    assert _set(client, world, amount="900").status_code == 403
    assert Budget.objects.get().amount == Decimal(500)
    _set(client, world, amount="300")
    assert Budget.objects.get().amount == Decimal(300)
    client.force_login(world.admin)
    _set(client, world, amount="900")
    assert Budget.objects.get().amount == Decimal(900)
