"""The capacity calendars (issue 52) in headless Chromium against the live portal (no cluster:
the pages read the database): the ask form's hint for a booking, the team's calendar and the
console's, each with 0 axe-core violations at 1280 px and at 390 px, and no sideways scroll of
the page on a phone (the weeks scroll in their own box)."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tenants.services import approvals as approval_services
from tenants.services import requests as request_services
from tests.portal.test_browser import SHOTS, csp_refusals, sign_in
from tests.portal.test_browser_ux import (  # noqa: F401 (fixture)
    DESKTOP,
    PHONE,
    assert_accessible,
    no_sideways_scroll,
    people,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def bookings(people):  # noqa: F811
    now = timezone.now()
    for tenant, amount, start, end in (
        (people.tenant, 4, 3, 5),
        (people.other_tenant, 6, 0, 2),
    ):
        request = request_services.submit_capacity_request(
            actor=people.admin,
            tenant=tenant,
            items={people.rc.slug: amount},
            starts_at=now + timedelta(days=start) if start else None,
            ends_at=now + timedelta(days=end),
            justification="booked",
        )
        approval_services.approve_capacity_request(actor=people.admin, request=request)
    request_services.submit_capacity_request(  # waits for approval: the console's backlog
        actor=people.member,
        tenant=people.tenant,
        items={people.rc.slug: 2},
        starts_at=now + timedelta(days=8),
        ends_at=now + timedelta(days=9),
        justification="waits",
    )
    return people


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280", "390"])
def test_the_team_calendar_is_accessible_and_fits_a_phone(
    live_server,
    browser,  # noqa: F811
    bookings,
    viewport,
):
    page = browser.new_page(viewport=viewport)
    refused = csp_refusals(page)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/calendar/")
    expect(page.get_by_role("heading", level=1)).to_contain_text("grants and bookings")
    expect(page.locator("table.calendar").first).to_contain_text("yours: 4")
    assert_accessible(page)
    assert no_sideways_scroll(page) and refused == []
    page.screenshot(path=SHOTS / f"team-calendar-{viewport['width']}.png", full_page=True)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280", "390"])
def test_the_console_calendar_is_accessible_and_fits_a_phone(
    live_server,
    browser,  # noqa: F811
    bookings,
    viewport,
):
    page = browser.new_page(viewport=viewport)
    refused = csp_refusals(page)
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/console/calendar/")
    table = page.locator("table.calendar").first
    expect(table).to_contain_text("team-b")
    expect(table).to_contain_text("2 waiting")
    assert_accessible(page)
    assert no_sideways_scroll(page) and refused == []
    page.screenshot(path=SHOTS / f"console-calendar-{viewport['width']}.png", full_page=True)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280", "390"])
def test_the_ask_forms_calendar_is_accessible_and_fits_a_phone(
    live_server,
    browser,  # noqa: F811
    bookings,
    viewport,
):
    page = browser.new_page(viewport=viewport)
    refused = csp_refusals(page)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/ask/")
    page.get_by_label("GPU model and profile").select_option(str(bookings.rc.pk))
    page.get_by_label("Amount").fill("2")
    start = timezone.localtime() + timedelta(days=3)
    page.get_by_label("Starts at (UTC)").fill(start.strftime("%Y-%m-%dT%H:%M"))
    hint = page.locator("#hint")
    expect(hint).to_contain_text("Booked ahead: starts")
    calendar = page.locator("#ask-calendar")
    calendar.locator("summary").click()
    expect(calendar.locator("table.calendar")).to_contain_text("booked")
    assert_accessible(page)
    assert no_sideways_scroll(page) and refused == []
