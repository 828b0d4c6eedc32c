"""Issue 35, second pass, in headless Chromium against the live portal (no cluster needed): what
decides stays in view on a phone (390 px) and on a desktop (1280 px), numbers that say what
exists, choices that can be had, long lists capped or grouped, and waits said in words. axe-core
checks each page, as in test_browser_ux.py."""

import re

import pytest
from playwright.sync_api import Page, expect

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

pytestmark = pytest.mark.django_db(transaction=True)


def box(page: Page, locator) -> dict:
    found = locator.bounding_box()
    assert found is not None, "not rendered"
    return found


def in_view_across(page: Page, locator) -> bool:
    """The element is drawn inside the window's width (not behind a sideways scroll)."""
    found = box(page, locator)
    width = page.viewport_size["width"]
    return found["x"] >= 0 and found["x"] + found["width"] <= width + 0.5


# --- (2) phones: rows are cards, state and actions first ----------------------------------------


def test_on_a_phone_rows_are_cards_with_state_and_actions_first(live_server, browser, people):  # noqa: F811
    running_workload(people, name="train-on-a-phone")
    page = browser.new_page(viewport=PHONE)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/")
    row = page.locator("section[aria-labelledby='workloads-h'] tbody tr").first
    state = row.get_by_text("Running", exact=True)
    assert in_view_across(page, state)
    assert box(page, state)["y"] < box(page, row.get_by_text("Job", exact=False))["y"] + 1
    assert no_sideways_scroll(page)
    assert_accessible(page)


def test_the_approval_queue_on_a_phone_is_compact(live_server, browser, people):  # noqa: F811
    asks = [pending(people, people.tenant, why=f"ask {n} " + "words " * 20) for n in range(6)]
    page = browser.new_page(viewport=PHONE)
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/console/")
    header = box(page, page.locator("header.top"))
    assert header["height"] <= 90, f"the menu takes {header['height']} px"
    row = page.locator("table tbody tr").first
    assert box(page, row)["height"] <= 200, f"a row is {box(page, row)['height']} px tall"
    for what in (
        row.get_by_text("1.50 USD/h"),
        row.get_by_text("ask 0"),
        page.get_by_role("button", name=f"Approve request {asks[0].pk}", exact=True),
        page.get_by_role("button", name=f"Reject request {asks[0].pk}", exact=True),
    ):
        assert in_view_across(page, what)
    page.get_by_label(f"Select request {asks[1].pk}", exact=True).check()
    bar = box(page, page.locator(".queue-actions"))
    assert bar["height"] <= 0.15 * PHONE["height"], f"the bulk bar is {bar['height']} px tall"
    assert no_sideways_scroll(page)
    assert_accessible(page)
    more = page.locator("header.top summary")
    more.click()
    expect(page.get_by_role("link", name="Audit log")).to_be_visible()
    assert_accessible(page)


def test_the_menu_holds_one_line_at_desktop_width(live_server, browser, people):  # noqa: F811
    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/console/")
    tops = page.evaluate(
        """() => [...document.querySelectorAll('header.top nav > *')]
            .filter(e => e.getBoundingClientRect().height > 0)
            .map(e => Math.round(e.getBoundingClientRect().top))"""
    )
    assert len(set(tops)) == 1, f"the menu wraps: {tops}"
    assert box(page, page.locator("header.top"))["height"] <= 60
    assert_accessible(page)


# --- (3) desktop: the deciding columns never scroll out of view ---------------------------------


def columns_out_of_view(page: Page, table) -> list[str]:
    """Headers of the table drawn outside its scrolling box (behind a sideways scroll)."""
    return table.evaluate(
        """t => { const box = (t.closest('.scroll') || t.parentElement).getBoundingClientRect();
            return [...t.querySelectorAll('th')].filter(th => {
                const r = th.getBoundingClientRect();
                return r.left < box.left - 0.5 || r.right > box.right + 0.5;
            }).map(th => th.textContent.trim()); }"""
    )


def test_tokens_and_the_team_queue_show_every_column_on_a_desktop(live_server, browser, people):  # noqa: F811
    from scheduler.cluster.models import TenantSyncState

    line = {"flavor": "a100-80gb", "resource": "nvidia.com/gpu", "nominal": 4, "used": 6}
    TenantSyncState.objects.create(
        tenant=people.tenant,
        queue_status={
            "queue": "tenant-team-a",
            "lines": [{**line, "borrowed": 2, "lent": 0}],
            "pending": 1,
            "admitted": 2,
            "active": True,
            "reason": "",
        },
    )
    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/tokens/")
    page.get_by_label("Name").fill("gitlab-ci-for-the-vision-team")
    page.get_by_role("button", name="Create token").click()
    tokens = page.locator("main table")
    assert columns_out_of_view(page, tokens) == []
    assert in_view_across(page, page.get_by_role("link", name="Revoke token", exact=False).first)
    assert_accessible(page)
    page.goto(f"{live_server.url}/teams/team-a/")
    queue = page.locator("section[aria-labelledby='queue-h'] table")
    assert columns_out_of_view(page, queue) == []
    expect(queue.locator("th").last).to_have_text("Lent")
    assert_accessible(page)


# --- (5) unused quota says what exists ----------------------------------------------------------


def test_unused_quota_says_what_is_promised_what_exists_and_what_is_free(
    live_server,
    browser,  # noqa: F811
    people,  # noqa: F811
):
    from decimal import Decimal

    from scheduler.workloads.models import Workload
    from tests.scheduler.factories import WorkloadFactory
    from tests.tenants.factories import QuotaGrantFactory

    people.pool.capacity, people.pool.overcommit_ratio = 7, Decimal("2")
    people.pool.save()
    QuotaGrantFactory(tenant=people.tenant, resource_class=people.rc, amount=14)
    WorkloadFactory(  # another team holds 4 of the 7 that exist
        tenant=people.other_tenant,
        resources={people.rc.slug: 4},
        state=Workload.State.RUNNING,
    )
    for viewport in (DESKTOP, PHONE):
        page = browser.new_page(viewport=viewport)
        sign_in(page, live_server.url, "member")
        page.goto(f"{live_server.url}/teams/team-a/")
        row = page.locator("table.quota tbody tr").first
        expect(row).to_contain_text("14 promised, 7 exist, 3 free now")
        expect(page.get_by_text("Unused quota is what the team may still start")).to_have_count(0)
        assert_accessible(page)
        assert no_sideways_scroll(page)
        page.close()


# --- (11) choices that cannot be had ------------------------------------------------------------


def test_forms_offer_only_what_can_be_had_and_link_to_ask(live_server, browser, people):  # noqa: F811
    from tests.tenants.factories import QuotaGrantFactory, ResourceClassFactory

    ResourceClassFactory(slug="a100-80gb-mig-2g.20gb", profile="2g.20gb")  # no pool
    QuotaGrantFactory(tenant=people.tenant, resource_class=people.rc, amount=2)
    for viewport in (DESKTOP, PHONE):
        page = browser.new_page(viewport=viewport)
        sign_in(page, live_server.url, "member")
        page.goto(f"{live_server.url}/teams/team-a/ask/")
        offered = page.locator("#id_resource_class option:not([value=''])")
        expect(offered).to_have_count(1)
        expect(offered).to_contain_text("A100-80GB MIG 3g.40gb")
        assert_accessible(page)
        page.goto(f"{live_server.url}/teams/team-a/workloads/new/")
        offered = page.locator("#id_resource_class option:not([value=''])")
        expect(offered).to_have_count(1)
        expect(offered).to_contain_text("2 × 3g.40gb (= 6 of 6 slices) free")
        assert_accessible(page)
        page.locator(".field-resource_class").get_by_role("link", name="Ask for capacity").click()
        expect(page.get_by_role("heading", name="Ask for capacity")).to_be_visible()
        page.close()


# --- (12) capped and grouped --------------------------------------------------------------------


def test_an_admin_lands_on_a_grouped_queue_and_a_team_page_stays_short(
    live_server,
    browser,  # noqa: F811
    people,  # noqa: F811
):
    people.pool.capacity = 100  # room for all of them
    people.pool.save()
    same = [pending(people, people.tenant, why="the same ask") for _ in range(12)]
    for n in range(7):
        pending(people, people.tenant, why=f"ask {n}")
    for viewport in (DESKTOP, PHONE):
        page = browser.new_page(viewport=viewport)
        sign_in(page, live_server.url, "platform")
        expect(page.get_by_role("heading", name="Approval queue")).to_contain_text("19 waiting")
        expect(page.locator("table tbody tr")).to_have_count(8)  # 12 identical asks, one row
        group = page.get_by_role("button", name=f"Approve 12 identical requests from {same[0].pk}")
        assert in_view_across(page, group)
        assert_accessible(page)
        page.goto(f"{live_server.url}/teams/team-a/")
        asks = page.locator("section[aria-labelledby='requests-h']")
        expect(asks.locator("li")).to_have_count(5)
        asks.get_by_role("link", name="Show all 19 waiting asks").click()
        expect(page.get_by_role("heading", name="Requests of Team-A")).to_contain_text("19")
        assert_accessible(page)
        page.close()
    page = browser.new_page(viewport=PHONE)
    sign_in(page, live_server.url, "platform")
    page.get_by_role("button", name=f"Approve 12 identical requests from {same[0].pk}").click()
    expect(page.get_by_text("Approved 12 identical requests.")).to_be_visible()
    expect(page.locator("table tbody tr")).to_have_count(7)


# --- (4) a waiting job's page says why, behind what, and when ------------------------------------


def test_a_waiting_jobs_page_says_what_it_waits_behind_and_when(live_server, browser, people):  # noqa: F811
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.workloads.models import Workload
    from tests.scheduler.factories import WorkloadFactory
    from tests.tenants.factories import QuotaGrantFactory

    QuotaGrantFactory(tenant=people.tenant, resource_class=people.rc, amount=2)
    two = {people.rc.slug: 2}
    WorkloadFactory(
        tenant=people.tenant,
        name="train-a",
        state=Workload.State.RUNNING,
        resources=two,
        started_at=timezone.now() - timedelta(minutes=30),
        max_run_s=3600,
    )
    WorkloadFactory(
        tenant=people.tenant, name="first-in-line", state=Workload.State.QUEUED, queue_position=1
    )
    waits = WorkloadFactory(
        tenant=people.tenant,
        name="eval-c",
        state=Workload.State.QUEUED,
        reason="Pending",
        queue_position=2,
        resources={people.rc.slug: 1},
        message="couldn't assign flavors to pod set main: insufficient unused quota, 6 more needed",
    )
    for viewport in (DESKTOP, PHONE):
        page = browser.new_page(viewport=viewport)
        sign_in(page, live_server.url, "member")
        page.goto(f"{live_server.url}/workloads/{waits.pk}/")
        expect(page.locator("#waiting-reason")).to_contain_text("in use by train-a")
        expect(page.locator("#waiting-behind")).to_contain_text("first-in-line (position 1)")
        expect(page.locator("#waiting-estimate")).to_contain_text(
            re.compile(r"In about (29|30) min at the latest")
        )
        expect(page.locator("#waiting-estimate")).to_contain_text("train-a reaches its maximum")
        expect(page.get_by_text("couldn't assign flavors")).not_to_be_visible()  # folded away
        assert_accessible(page)
        assert no_sideways_scroll(page)
        page.close()


# --- (8) borrowing adds up ----------------------------------------------------------------------


def test_borrowing_adds_up_and_says_whose_units(live_server, browser, people):  # noqa: F811
    from scheduler.cluster.models import TenantSyncState
    from tests.scheduler.factories import NodeFactory, PodAllocationFactory

    mig = "nvidia.com/mig-3g.40gb"

    def queue(nominal, used, borrowed, lent):
        line = {"flavor": "h100-80gb", "resource": mig, "nominal": nominal, "used": used}
        return {
            "queue": "q",
            "lines": [{**line, "borrowed": borrowed, "lent": lent}],
            "pending": 0,
            "admitted": 1,
            "active": True,
            "reason": "",
        }

    TenantSyncState.objects.create(tenant=people.tenant, queue_status=queue(4, 0, 0, 2))
    TenantSyncState.objects.create(tenant=people.other_tenant, queue_status=queue(0, 2, 2, 0))
    NodeFactory(
        name="gpu-h100-0",
        gpu_model="H100-80GB",
        gpu_count=1,
        mig_config="all-3g.40gb",
        allocatable={mig: 2},
    )
    PodAllocationFactory(node_name="gpu-h100-0", tenant=people.other_tenant, resources={mig: 2})
    for viewport in (DESKTOP, PHONE):
        page = browser.new_page(viewport=viewport)
        sign_in(page, live_server.url, "platform")
        page.goto(f"{live_server.url}/console/queues/")
        expect(page.locator("#cohort-borrowing")).to_have_text(
            f"h100-80gb {mig}: team-b borrows 2, lent by team-a."
        )
        lender = page.locator("section[aria-labelledby='q-team-a'] tbody tr").first
        expect(lender.locator("td").last).to_have_text("2 to team-b")
        assert_accessible(page)
        page.goto(f"{live_server.url}/teams/team-a/")
        expect(page.locator("section[aria-labelledby='queue-h'] tbody td").last).to_have_text(
            "2 to team-b"
        )
        page.goto(f"{live_server.url}/console/capacity/")
        block = page.locator("svg.map g.block.borrowed").first
        expect(block.locator("title")).to_contain_text(
            "team-b (borrowed from the cohort): idle units lent by team-a"
        )
        expect(block.locator("text")).to_have_count(1)  # the label shares the block's tooltip
        assert_accessible(page)
        page.close()
