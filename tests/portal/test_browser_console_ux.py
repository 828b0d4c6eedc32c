"""The platform console in headless Chromium (no cluster needed): the approval queue scales
(filters, sort, age and cost, per-row decisions with notes, a refused reject keeps the selection,
decisions on the request's own page, no archived team's asks), and the console's smaller pages
read well on a phone. axe-core checks each page, as in test_browser_ux.py."""

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from tenants.models import CapacityRequest
from tests.portal.test_browser_ux import (  # noqa: F401 (fixture)
    DESKTOP,
    PHONE,
    assert_accessible,
    no_sideways_scroll,
    pending,
    people,
    sign_in,
)
from tests.scheduler.factories import NodeFactory
from tests.tenants.factories import TenantFactory

pytestmark = pytest.mark.django_db(transaction=True)


# --- (1) the approval queue ----------------------------------------------------------------------


@pytest.fixture
def queue_world(people):  # noqa: F811
    archived = TenantFactory(slug="gone", name="Gone team", status="archived")
    old = pending(people, people.tenant, amount=1, days_old=5, why="old and small")
    big = pending(people, people.other_tenant, amount=8, why="big and new")
    asks = [pending(people, people.tenant, why=f"ask {n}") for n in range(26)]
    hidden = pending(people, archived, why="from an archived team")
    return old, big, asks, hidden


def test_the_queue_filters_sorts_pages_and_hides_archived_teams(live_server, browser, queue_world):  # noqa: F811
    old, big, asks, hidden = queue_world
    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/console/")
    expect(page.get_by_role("heading", name="Approval queue")).to_contain_text("28 waiting")
    expect(page.get_by_text("from an archived team")).to_have_count(0)
    rows = page.locator("table tbody tr")
    expect(rows).to_have_count(25)  # one page; the rest on the next
    expect(rows.first).to_contain_text("old and small")  # oldest first
    expect(rows.first).to_contain_text("5\xa0days")  # its age
    expect(rows.first).to_contain_text("1.50 USD/h")  # and its cost
    assert_accessible(page)
    page.get_by_label("Sort", exact=True).select_option("cost")
    page.get_by_role("button", name="Show").click()
    expect(rows.first).to_contain_text("big and new")  # 8 units cost the most
    expect(rows.first).to_contain_text("12.00 USD/h")
    page.get_by_label("Team", exact=True).select_option("team-a")
    page.get_by_label("Age", exact=True).select_option("3")
    page.get_by_role("button", name="Show").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("old and small")
    expect(page.get_by_label("Team", exact=True)).to_have_value(
        "team-a"
    )  # the filters stay as chosen
    page.get_by_role("link", name="Clear").click()
    page.get_by_role("link", name="Next →").click()
    expect(rows).to_have_count(3)
    assert_accessible(page)


def test_deciding_in_the_queue_keeps_the_selection_and_points_at_the_missing_reason(
    live_server,
    browser,  # noqa: F811
    queue_world,
):
    old, big, asks, _ = queue_world
    page = browser.new_page(viewport=PHONE)
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/console/")
    assert no_sideways_scroll(page)
    page.get_by_label(f"Select request {asks[0].pk}", exact=True).check()
    page.get_by_label(f"Select request {asks[1].pk}", exact=True).check()
    page.get_by_role("button", name="Reject selected").click()
    comment = page.get_by_label("Comment (required to reject)")
    expect(comment).to_be_focused()  # the error is where the fix is
    expect(page.locator("#id_comment_error")).to_contain_text("say why the request is rejected")
    expect(page.get_by_label(f"Select request {asks[0].pk}", exact=True)).to_be_checked()  # kept
    expect(page.get_by_label(f"Select request {asks[1].pk}", exact=True)).to_be_checked()
    assert_accessible(page)
    page.keyboard.type("Use the shared pool instead")
    page.get_by_role("button", name="Reject selected").click()
    expect(page.get_by_text("Rejected 2 requests.")).to_be_visible()
    # one row on its own, with its own note: without one, the error sits at that row
    page.get_by_role("button", name=f"Reject request {big.pk}", exact=True).click()
    note = page.get_by_label(f"Note for request {big.pk}", exact=True)
    expect(note).to_be_focused()
    expect(page.locator(f"#note-{big.pk}-error")).to_contain_text("say why")
    note.fill("Too big for now")
    page.get_by_role("button", name=f"Reject request {big.pk}", exact=True).click()
    expect(page.get_by_text(f"Rejected request #{big.pk}")).to_be_visible()
    page.get_by_role("button", name=f"Approve request {old.pk}", exact=True).click()
    expect(page.get_by_text(f"Approved request #{old.pk}")).to_be_visible()
    states = dict(CapacityRequest.objects.values_list("pk", "state"))
    assert (states[asks[0].pk], states[asks[1].pk], states[big.pk], states[old.pk]) == (
        "rejected",
        "rejected",
        "rejected",
        "approved",
    )
    assert states[asks[2].pk] == "submitted"


def test_an_admin_decides_on_the_requests_own_page(live_server, browser, queue_world):  # noqa: F811
    old, *_ = queue_world
    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/requests/{old.pk}/")
    assert_accessible(page)
    page.get_by_label("Note to the team (required to reject)").fill("Enjoy")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_text(f"Approved request #{old.pk}")).to_be_visible()
    expect(page.locator("ol.timeline")).to_contain_text("Enjoy")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    old.refresh_from_db()
    assert old.state == CapacityRequest.State.APPROVED


# --- also: reconcile page, audit filters, tenant filter, diagram labels -------------------------


def headers_broken_letter_by_letter(page: Page) -> list[str]:
    """Table headers taller than two lines of text (a header wrapped letter by letter)."""
    return page.evaluate(
        """() => [...document.querySelectorAll('th')].filter(th => {
            const line = parseFloat(getComputedStyle(th).lineHeight) || 20;
            return th.getBoundingClientRect().height > 2.6 * line;
        }).map(th => th.textContent.trim())"""
    )


def test_console_details_read_well_on_a_phone(live_server, browser, people):  # noqa: F811
    from scheduler.cluster.models import ReconcileRun, TenantSyncState

    TenantFactory(slug="old-team", name="Old team", status="archived")
    NodeFactory(name="gpu-a100-0")
    TenantSyncState.objects.create(tenant=people.tenant, status="failed")
    ReconcileRun.objects.create(
        tenant=people.tenant,
        started_at=timezone.now(),
        drift=["ResourceQuota gpu-portal-quota: requests.nvidia.com/mig-3g.40gb 2 -> 3"] * 3,
        error="admission webhook denied the request: " + "x" * 120,
    )
    page = browser.new_page(viewport=PHONE)
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/console/health/")
    assert headers_broken_letter_by_letter(page) == []
    assert_accessible(page)
    page.get_by_role("button", name="Reconcile now").click()
    expect(page.get_by_text("Reconcile queued")).to_be_visible()
    page.goto(f"{live_server.url}/console/audit/")
    expect(page.get_by_label("Who (name contains)")).to_be_visible()
    expect(page.get_by_label("From (UTC)")).to_have_attribute("type", "datetime-local")
    page.get_by_label("From (UTC)").fill("2020-01-01T00:00")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator(".error")).to_have_count(0)  # the picker's value is understood
    assert_accessible(page)
    page.goto(f"{live_server.url}/console/tenants/")
    page.get_by_label("Status").select_option("archived")
    page.get_by_role("button", name="Show").click()
    rows = page.locator("table tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Old team")
    page.goto(f"{live_server.url}/console/capacity/")
    label = page.locator("svg.map text").first
    expect(label).to_be_visible()
    assert label.bounding_box()["height"] >= 9  # readable, not about 6 px
    assert_accessible(page)
    assert no_sideways_scroll(page)
