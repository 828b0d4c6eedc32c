"""What was cut or out of reach (issue 49, 9), measured in headless Chromium at 1280 and 390 px:
the statement's "Billed" column fits at 1280 px, the approval queue's policy reasons open at
either width, and the team page's "Ask for more" is on screen on a phone; axe-core finds
nothing on each page."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import Locator, Page, expect

from metering import rollups
from metering.models import UsageSample
from tenants.models import CapacityRequest
from tests.portal.test_browser_ux import (  # noqa: F401 (fixture)
    DESKTOP,
    PHONE,
    assert_accessible,
    no_sideways_scroll,
    pending,
    people,
    running_workload,
    sign_in,
)
from tests.tenants.factories import QuotaGrantFactory

pytestmark = pytest.mark.django_db(transaction=True)

REASONS = [
    "a100-80gb-mig-3g.40gb: 3 is more than the 2 approved automatically",
    "a100-80gb-mig-3g.40gb: 336 h is longer than the 72 h approved automatically",
    "the department's quota: a platform admin must approve this ask, or raise its quota",
]


@pytest.fixture
def used(people):  # noqa: F811
    QuotaGrantFactory(tenant=people.tenant, resource_class=people.rc, amount=4)
    running_workload(people, units=1)
    hour = timezone.now().replace(minute=5, second=0, microsecond=0) - timedelta(hours=1)
    UsageSample.objects.bulk_create(
        UsageSample(
            at=hour + timedelta(minutes=m),
            tenant=people.tenant,
            resource_class=people.rc,
            allocated=1,
            known=1,
            used=Decimal("0.5"),
            quota=3,
        )
        for m in range(0, 30, 5)
    )
    rollups.roll_up_hours()
    ask = pending(people, people.tenant, amount=3, why="fine-tune the vision model " * 4)
    CapacityRequest.objects.filter(pk=ask.pk).update(policy_reasons=REASONS)
    return people


def on_screen(page: Page, element: Locator, within: Locator | None = None) -> None:
    """The element is drawn inside the viewport (and inside `within`, a scrolling box)."""
    box = element.bounding_box()
    assert box is not None, "not drawn"
    width = page.viewport_size["width"]
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, (box, width)
    if within is not None:
        outer = within.bounding_box()
        assert outer is not None
        assert box["x"] + box["width"] <= outer["x"] + outer["width"] + 0.5, (box, outer)


def test_the_statements_billed_column_fits_at_1280(live_server, browser, used):
    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, live_server.url, "owner")
    page.goto(f"{live_server.url}/usage/teams/team-a/")
    statement = page.locator("div.scroll", has=page.get_by_role("columnheader", name="Billed USD"))
    on_screen(page, page.get_by_role("columnheader", name="Billed USD"), within=statement)
    on_screen(page, statement.locator("tbody tr td").last, within=statement)
    assert statement.evaluate("e => e.scrollWidth <= e.clientWidth")  # nothing to scroll to
    assert_accessible(page)


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_the_queues_policy_reasons_open_and_fit(live_server, browser, used, viewport):
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/console/")
    summary = page.get_by_text("Outside the auto-approval policy (3)")
    expect(summary).to_be_visible()
    on_screen(page, summary)
    summary.click()
    for reason in REASONS[1:]:
        line = page.get_by_text(reason.split(": ", 1)[1], exact=False)
        expect(line).to_be_visible()
        on_screen(page, line)
    assert no_sideways_scroll(page)
    assert_accessible(page)


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_ask_for_more_is_on_screen_on_the_team_page(live_server, browser, used, viewport):
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/")
    link = page.get_by_role("link", name="Ask for more A100-80GB MIG 3g.40gb")
    expect(link).to_have_count(1)  # the one drawn at this width
    on_screen(page, link)
    assert no_sideways_scroll(page)
    assert_accessible(page)
    link.click()
    expect(page.get_by_label("GPU model and profile")).to_have_value(str(used.rc.pk))
