"""The admin sees waste and money (issue 49, 8): held-but-idle with no utilisation source is
unknown, not 0.00; a refused ask gives the route to the platform team (PLATFORM_CONTACT); the
month's budget is set from the team page and an ask's monthly cost is read against it."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from metering import services as metering_services
from metering.models import AllocationInterval
from metering.selectors import budget_left, current_month
from scheduler.cluster.models import Cluster
from tests.portal.test_browser import csp_refusals, sign_in
from tests.portal.test_browser_ux import DESKTOP, PHONE, assert_accessible, no_sideways_scroll
from tests.tenants.factories import QuotaGrantFactory


@pytest.mark.django_db
def test_budget_left_is_the_budget_less_the_spend_or_none(world):
    assert budget_left(world.tenant) is None
    metering_services.set_budget(
        actor=world.admin, tenant=world.tenant, month=current_month(), amount="500"
    )
    left = budget_left(world.tenant)
    assert left is not None
    assert (left["budget"], left["left"]) == (Decimal("500"), Decimal("500") - left["spent"])


@pytest.mark.django_db
def test_held_but_idle_without_utilisation_is_unknown_not_zero(world):
    now = timezone.now()
    AllocationInterval.objects.create(
        cluster=Cluster.objects.create(name="local"),
        pod_uid="u1",
        namespace="ns",
        pod_name="held",
        node_name="a100",
        tenant=world.tenant,
        resource_class=world.rc,
        resource_name=world.rc.resource_name,
        gpu_model="A100-80GB",
        units=1,
        started_at=max(now - timedelta(hours=3), now.replace(day=1, hour=0, minute=0)),
        last_seen_at=now,
    )
    client = Client()
    client.force_login(world.admin)
    body = client.get(reverse("metering:platform_usage")).content.decode()
    waste = body[body.index('id="waste-h"') :]
    assert "unknown (no utilisation source)" in waste
    assert 'id="waste-unknown"' in waste


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_admin_sets_the_budget_on_the_team_page_and_an_ask_reads_against_it(
    live_server, browser, world, viewport, settings
):
    settings.PLATFORM_CONTACT = "mailto:gpu-help@example.org"
    QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, amount=2)
    for user in (world.admin, world.member):
        user.set_password("pw")
        user.save()
    page = browser.new_page(viewport=viewport)
    refused = csp_refusals(page)
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/teams/team-a/")
    form = page.locator("#team-budget")
    form.get_by_label("Amount").fill("750")
    form.get_by_role("button", name="Set budget").click()
    expect(page).to_have_url(f"{live_server.url}/teams/team-a/")
    expect(page.locator(".messages")).to_contain_text("budget for")
    expect(page.locator("section[aria-labelledby='cost-h']")).to_contain_text("750")
    assert_accessible(page)
    assert no_sideways_scroll(page) and refused == []

    member = browser.new_page(viewport=viewport)
    sign_in(member, live_server.url, "member")
    expect(member.locator("#team-budget")).to_have_count(0)  # a member does not set it
    member.goto(f"{live_server.url}/teams/team-a/ask/")
    member.get_by_label("GPU model and profile").select_option(str(world.rc.pk))
    member.get_by_label("Amount").fill("1")
    expect(member.locator("#ask-budget")).to_contain_text("750.00")
    expect(member.locator("#ask-budget")).to_contain_text("left")
    member.get_by_label("Amount").fill("900")  # more than the pool holds: refused
    contact = member.locator("#platform-contact a")
    expect(contact).to_have_attribute("href", "mailto:gpu-help@example.org")
    expect(contact).to_have_text("gpu-help@example.org")
    assert_accessible(member)
    assert no_sideways_scroll(member)


@pytest.mark.django_db
def test_the_team_page_offers_the_budget_to_whom_the_budget_service_allows(world):
    for user in (world.admin, world.owner, world.member, world.viewer):
        client = Client()
        client.force_login(user)
        page = client.get(reverse("team_detail", args=[world.tenant.slug]))
        assert page.context["can_set_budget"] == metering_services.can_set_budget(
            user, world.tenant
        )
        assert ('id="team-budget"' in page.content.decode()) == page.context["can_set_budget"]
