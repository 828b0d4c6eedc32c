"""Self-service that is safe to use, in headless Chromium against the live portal (no cluster
needed: the pages read the database): destructive actions ask first and say what they do, a
token's secret is shown once, the forms work by keyboard and at phone width, and axe-core (from
node_modules, injected into each page) finds no accessibility violation."""

import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone
from playwright.sync_api import Page, expect

from metering import rollups
from metering.models import AllocationInterval, UsageSample
from scheduler.cluster.models import Cluster
from scheduler.workloads.kinds.manifests import Observation
from scheduler.workloads.lifecycle.sync import change_state
from scheduler.workloads.models import Workload, WorkloadEvent
from tenants.models import ApiToken, CapacityRequest, Membership
from tenants.services import approvals as approval_services
from tenants.services import requests as request_services
from tests.portal.test_browser import SHOTS, csp_refusals, sign_in
from tests.scheduler.factories import WorkloadFactory
from tests.tenants.factories import (
    CapacityRequestFactory,
    CapacityRequestItemFactory,
    QuotaGrantFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db(transaction=True)

AXE = Path(settings.BASE_DIR) / "node_modules" / "axe-core" / "axe.min.js"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


def axe_violations(page: Page) -> list[str]:
    """axe-core's WCAG 2.1 A/AA and best-practice violations on the page as it is now, one line
    each. Evaluated through the DevTools protocol, so the portal's CSP does not refuse it."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text())
    found = page.evaluate(
        """async () => (await axe.run(document, {runOnly: {type: 'tag', values:
            ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice']}})).violations
            .map(v => v.id + ': ' + v.help + ' @ '
                 + v.nodes.map(n => n.target.join(' ')).join(', '))"""
    )
    return list(found)


def assert_accessible(page: Page) -> None:
    found = axe_violations(page)
    assert not found, "axe-core: " + "\n".join(found)


def no_sideways_scroll(page: Page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


@pytest.fixture
def people(world):
    for user in (world.admin, world.owner, world.member):
        user.set_password("pw")
        user.save()
    world.rc.gpu_model = "A100-80GB"
    world.rc.save()
    return world


def running_workload(world, *, units=1, name="train-7") -> Workload:
    return WorkloadFactory(
        tenant=world.tenant,
        name=name,
        submitted_by=world.member,
        resources={world.rc.slug: units},
        state=Workload.State.RUNNING,
        started_at=timezone.now() - timedelta(minutes=5),
    )


# --- (5) one-click destructive actions ---------------------------------------------------------


def test_cancelling_a_workload_asks_first_and_says_what_stops(live_server, browser, people):  # noqa: F811
    w = running_workload(people, units=2)
    page = browser.new_page(viewport=PHONE)
    refused = csp_refusals(page)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/workloads/{w.pk}/")
    # by keyboard: the cancel link is reached with Tab and followed with Enter
    page.get_by_role("link", name="Cancel…").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Cancel train-7?")).to_be_visible()
    expect(page.locator("#consequences")).to_contain_text(
        "Its 1 running pod stops at once and 2 × A100-80GB MIG 3g.40gb go back"
    )
    assert_accessible(page)
    assert no_sideways_scroll(page)
    page.screenshot(path=SHOTS / "confirm-cancel-workload.png", full_page=True)
    page.get_by_role("link", name="Keep train-7 running").click()
    w.refresh_from_db()
    assert w.state == Workload.State.RUNNING  # nothing happened on the way there and back
    page.get_by_role("link", name="Cancel…").click()
    page.get_by_role("button", name="Cancel train-7").click()
    expect(page.get_by_text("train-7 cancelled.")).to_be_visible()
    w.refresh_from_db()
    assert w.state == Workload.State.CANCELLED and refused == []


def test_giving_capacity_back_says_what_the_running_pods_hold(live_server, browser, people):  # noqa: F811
    request = request_services.submit_capacity_request(
        actor=people.member,
        tenant=people.tenant,
        items={people.rc.slug: 2},
        ends_at=None,
        justification="training",
    )
    approval_services.approve_capacity_request(actor=people.admin, request=request, comment="ok")
    running_workload(people, units=2)
    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/requests/{request.pk}/")
    page.get_by_role("link", name="Give capacity back…").click()
    consequences = page.locator("#consequences")
    expect(consequences).to_contain_text("quota of A100-80GB MIG 3g.40gb goes from 2 to 0")
    expect(consequences).to_contain_text(
        "2 units of A100-80GB MIG 3g.40gb are held by running pods: 2 units would be over"
    )
    assert_accessible(page)
    page.get_by_role("button", name="Give capacity back").click()
    expect(page.get_by_text(f"Request #{request.pk} cancelled.")).to_be_visible()
    request.refresh_from_db()
    assert request.state == CapacityRequest.State.CANCELLED


def test_a_new_token_is_shown_once_and_a_reload_creates_no_second_one(live_server, browser, people):  # noqa: F811
    page = browser.new_page(viewport=PHONE)
    refused = csp_refusals(page)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/tokens/")
    assert_accessible(page)
    page.get_by_label("Name").fill("gitlab-ci")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#secret")
    expect(secret).to_contain_text("gpp_")
    shown = secret.inner_text()
    assert_accessible(page)
    assert no_sideways_scroll(page)
    page.reload()  # a GET after the redirect: no form posted again, the secret not shown again
    expect(page.get_by_role("heading", name="Tokens", exact=True)).to_be_visible()
    expect(page.locator("#secret")).to_have_count(0)
    assert shown not in page.content()
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 1
    token = ApiToken.objects.get()
    page.get_by_role("link", name=f"Revoke token {token.prefix}… (gitlab-ci)").click()
    expect(page.locator("#consequences")).to_contain_text(
        f"Anything that uses {token.prefix}… (gitlab-ci) is refused from now on."
    )
    expect(page.locator("#consequences")).to_contain_text("It has never been used.")
    assert_accessible(page)
    page.get_by_role("link", name="Keep the token").click()
    token.refresh_from_db()
    assert token.revoked_at is None
    page.get_by_role("link", name=f"Revoke token {token.prefix}… (gitlab-ci)").click()
    page.get_by_role("button", name="Revoke the token").click()
    expect(page.get_by_text(f"Token {token.prefix}… revoked.")).to_be_visible()
    token.refresh_from_db()
    assert token.revoked_at is not None and refused == []


def test_a_new_tokens_secret_is_copied_with_one_click(live_server, browser, people):  # noqa: F811
    """Issue 35, 12: a copy button for the secret shown once, and no scope ticked is refused."""
    context = browser.new_context(
        viewport=DESKTOP, permissions=["clipboard-read", "clipboard-write"]
    )
    page = context.new_page()
    refused = csp_refusals(page)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/tokens/")
    page.get_by_label("Name").fill("gitlab-ci")
    page.get_by_label("read", exact=True).uncheck()
    page.get_by_role("button", name="Create token").click()
    expect(page.locator("#id_scopes_error")).to_contain_text("Tick at least one scope")
    assert not ApiToken.objects.exists()
    page.get_by_label("read", exact=True).check()
    page.get_by_role("button", name="Create token").click()
    shown = page.locator("#secret").inner_text().strip()
    page.get_by_role("button", name="Copy the token").click()
    expect(page.locator("#secret-copied")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == shown
    assert_accessible(page)
    assert refused == []
    context.close()


def test_add_member_defaults_to_member_and_removing_asks_first(live_server, browser, people):  # noqa: F811
    UserFactory(username="newbie")
    page = browser.new_page(viewport=PHONE)
    sign_in(page, live_server.url, "owner")
    page.goto(f"{live_server.url}/teams/team-a/")
    expect(page.locator("#id_role")).to_have_value("member")
    # keyboard only: type the name, Tab past the role (left at its default), Enter on the button
    page.locator("#id_username").fill("newbie")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Add member")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_text("newbie added.")).to_be_visible()
    assert Membership.objects.get(user__username="newbie").role == Membership.Role.MEMBER
    assert no_sideways_scroll(page)
    page.get_by_role("link", name="Remove newbie").click()
    expect(
        page.get_by_role("heading", name=f"Remove newbie from {people.tenant.name}?")
    ).to_be_visible()
    expect(page.locator("#consequences")).to_contain_text("newbie loses access")
    assert_accessible(page)
    page.get_by_role("button", name="Remove newbie").click()
    expect(page.get_by_text("newbie removed.")).to_be_visible()
    assert not Membership.objects.filter(user__username="newbie").exists()


# --- (10) errors and accessibility --------------------------------------------------------------


def dangling_describedby(page: Page) -> list[str]:
    """ids that an aria-describedby on the page points at but no element has."""
    return page.evaluate(
        """() => [...document.querySelectorAll('[aria-describedby]')]
            .flatMap(el => el.getAttribute('aria-describedby').split(/\\s+/).filter(Boolean))
            .filter(id => !document.getElementById(id))"""
    )


def member_on_the_ask_page(chromium, live_server) -> tuple[Page, list[str]]:
    """A member's phone on team-a's ask form, with the CSP refusals it collects."""
    page = chromium.new_page(viewport=PHONE)
    refused = csp_refusals(page)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/ask/")
    return page, refused


def test_ask_form_errors_take_the_focus_and_are_described_by_the_field(
    live_server,
    browser,  # noqa: F811
    people,
):
    page, refused = member_on_the_ask_page(browser, live_server)
    assert dangling_describedby(page) == []
    assert_accessible(page)
    # keyboard only: Tab to the submit button and press Enter with nothing filled in
    page.get_by_role("button", name="Send request").focus()
    page.keyboard.press("Enter")
    first = page.locator("#id_resource_class")
    expect(first).to_be_focused()  # focus moved to the first field in error
    expect(first).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#id_resource_class_error")).to_contain_text("This field is required")
    assert "id_resource_class_error" in first.get_attribute("aria-describedby")
    assert dangling_describedby(page) == []
    assert_accessible(page)
    assert no_sideways_scroll(page) and refused == []


def test_workload_form_offers_only_the_allowed_priorities_and_points_at_the_error(
    live_server,
    browser,  # noqa: F811
    people,
):
    QuotaGrantFactory(tenant=people.tenant, resource_class=people.rc, amount=1)
    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/workloads/new/")
    options = page.locator("#id_priority option").evaluate_all("os => os.map(o => o.value)")
    assert options == ["gpu-high", "gpu-low"]  # the team's allowed classes, not gpu-critical
    expect(page.locator("#id_priority")).to_have_value("gpu-low")
    assert dangling_describedby(page) == []
    assert_accessible(page)
    page.get_by_label("Name").fill("train-7")
    page.get_by_label("GPU resource").select_option(people.rc.slug)
    page.get_by_label("Units per pod").fill("3")
    page.get_by_role("button", name="Submit").click()
    units = page.locator("#id_units")  # "too many units" is said at Units (issue 49, 5)
    expect(units).to_be_focused()
    error = page.locator("#id_units_error")
    expect(error).to_contain_text("ask for 2 × 3g.40gb (= 6 slices) more")
    assert dangling_describedby(page) == []
    assert_accessible(page)


def test_a_refused_new_member_is_explained_at_the_form(live_server, browser, people):  # noqa: F811
    page = browser.new_page(viewport=PHONE)
    sign_in(page, live_server.url, "owner")
    page.goto(f"{live_server.url}/teams/team-a/")
    assert_accessible(page)
    page.get_by_label("Username").fill("nobody")
    page.get_by_role("button", name="Add member").click()
    username = page.locator("#id_username")
    expect(username).to_be_focused()
    expect(username).to_have_value("nobody")  # what was typed is kept
    error = page.locator("#add-member #id_username_error")
    expect(error).to_contain_text("no user 'nobody'")
    expect(page.locator("ul.messages")).to_have_count(0)  # not at the top of the page
    assert dangling_describedby(page) == []
    assert_accessible(page)
    assert no_sideways_scroll(page)


SELF_SERVICE_PAGES = [
    "/",
    "/teams/team-a/",
    "/teams/team-a/ask/",
    "/teams/team-a/workloads/",
    "/teams/team-a/workloads/new/",
    "/workloads/{workload}/",
    "/requests/{request}/",
    "/tokens/",
    "/usage/teams/team-a/",
]
CONSOLE_PAGES = [
    "/console/",
    "/console/capacity/",
    "/console/tenants/",
    "/console/queues/",
    "/console/health/",
    "/console/audit/",
    "/console/plans/",
    "/usage/platform/",
]


def test_axe_finds_nothing_on_the_self_service_and_console_pages(live_server, browser, people):  # noqa: F811
    request = request_services.submit_capacity_request(
        actor=people.member,
        tenant=people.tenant,
        items={people.rc.slug: 5},
        ends_at=None,
        justification="training",
    )
    ids = {"workload": running_workload(people).pk, "request": request.pk}
    found = {}
    for username, paths in (("member", SELF_SERVICE_PAGES), ("platform", CONSOLE_PAGES)):
        for viewport in (DESKTOP, PHONE):
            page = browser.new_page(viewport=viewport)
            sign_in(page, live_server.url, username)
            for path in paths:
                page.goto(live_server.url + path.format(**ids))
                if violations := axe_violations(page):
                    found[f"{path} @ {viewport['width']}px"] = violations
                if not no_sideways_scroll(page):
                    found[f"{path} @ {viewport['width']}px"] = ["scrolls sideways"]
            page.close()
    assert not found, "\n".join(f"{where}: {v}" for where, vs in found.items() for v in vs)


# --- (2) and (3) the ask form: honest hint, durations as presets --------------------------------


def choose(page: Page, rc, amount: int) -> None:
    page.get_by_label("GPU model and profile").select_option(value=str(rc.pk))
    page.locator("#id_amount").fill(str(amount))


def test_a_preset_duration_shows_its_end_time_zone_and_cost_by_keyboard(
    live_server,
    browser,  # noqa: F811
    people,
):
    page, refused = member_on_the_ask_page(browser, live_server)
    choose(page, people.rc, 2)
    expect(page.locator("#id_ends_at")).to_be_hidden()  # no date picker unless asked for
    # keyboard: Tab into the radio group (focus lands on the checked one), arrows choose
    page.locator("#id_amount").focus()
    page.keyboard.press("Tab")
    # bounded by default (issue 49, 9): with no auto-approval rule, the shortest preset
    expect(page.get_by_label("1 day")).to_be_focused()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    expect(page.get_by_label("1 week")).to_be_checked()
    hint = page.locator("#hint")
    expect(hint).to_contain_text("(1 week)")
    expect(hint).to_contain_text("UTC")  # the end time says its zone
    expect(hint).to_contain_text("3.00 USD/h, about 504.00 USD if held to the end")
    expect(hint).to_contain_text("Goes to the platform team")  # no auto-approval rule here
    assert_accessible(page)
    assert no_sideways_scroll(page) and refused == []
    page.screenshot(path=SHOTS / "ask-presets.png", full_page=True)


def test_the_hint_refuses_what_the_submit_refuses_and_survives_errors(
    live_server,
    browser,  # noqa: F811
    people,
):
    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/ask/")
    choose(page, people.rc, 11)  # the pool can grant 10
    hint = page.locator("#hint")
    expect(hint).to_contain_text("This ask would be refused")
    expect(hint).to_contain_text("asked for 11 but only 10 of 10 can still be granted")
    page.locator("#id_amount").fill("2")
    page.get_by_label("Until a date").check()
    ends = page.get_by_label("Ends at (UTC)")
    expect(ends).to_be_visible()
    past = (timezone.localtime() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    ends.fill(past)
    ends.dispatch_event("change")
    expect(hint).to_contain_text("end must be in the future")  # not "approved at once"
    expect(hint).not_to_contain_text("Approved at once")
    page.get_by_role("button", name="Send request").click()  # "Why" is left empty
    expect(page.locator("#id_justification")).to_be_focused()
    # the hint is still about what was chosen, not the blank one
    expect(page.locator("#hint")).to_contain_text("2 × A100-80GB MIG 3g.40gb")
    expect(page.locator("#hint")).to_contain_text("end must be in the future")
    page.locator("#id_justification").fill("Fine-tune")
    page.get_by_role("button", name="Send request").click()
    # the submit says what the hint said, under the field whose label says "Ends"
    expect(page.locator("#id_ends_at_error")).to_contain_text("end must be in the future")
    expect(page.locator("#id_ends_at")).to_be_focused()
    assert not CapacityRequest.objects.exists()
    assert_accessible(page)


def pending(world, tenant, *, amount=1, days_old=0, why="training") -> CapacityRequest:
    """A pending ask of `tenant` by the member, `days_old` days ago."""
    request = CapacityRequestFactory(tenant=tenant, requester=world.member, justification=why)
    CapacityRequestItemFactory(request=request, resource_class=world.rc, amount=amount)
    if days_old:
        CapacityRequest.objects.filter(pk=request.pk).update(
            created_at=timezone.now() - timedelta(days=days_old)
        )
    return request


# --- (9) request history ------------------------------------------------------------------------


def test_owners_see_what_waits_and_every_request_of_the_team(live_server, browser, people):  # noqa: F811
    mine = pending(people, people.tenant, why="the owner's", days_old=2)
    CapacityRequest.objects.filter(pk=mine.pk).update(requester=people.owner)
    for n in range(30):
        pending(people, people.tenant, why=f"member {n}")
    page = browser.new_page(viewport=PHONE)
    sign_in(page, live_server.url, "owner")
    page.goto(f"{live_server.url}/teams/team-a/")
    waiting = page.locator("section[aria-labelledby='requests-h']")
    expect(waiting.get_by_role("heading", name="Waiting for the platform team")).to_be_visible()
    expect(waiting.locator("li").first).to_contain_text(f"#{mine.pk}")  # oldest first
    expect(waiting.locator("li").first).to_contain_text("waiting 2\xa0days")
    expect(waiting.locator("li").first).to_contain_text("1 × A100-80GB MIG 3g.40gb")
    waiting.get_by_role("link", name="All requests").click()
    expect(page.get_by_role("heading", name="Requests of Team-A")).to_contain_text("31")
    expect(page.locator("table tbody tr")).to_have_count(25)
    assert_accessible(page)
    assert no_sideways_scroll(page)
    page.get_by_label("Whose").select_option("1")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("table tbody tr")).to_have_count(1)
    expect(page.locator("table tbody tr").first).to_contain_text(f"#{mine.pk}")


# --- (6) workload pages ------------------------------------------------------------------------


def test_the_workload_page_follows_the_state_and_runs_again(live_server, browser, people):  # noqa: F811
    QuotaGrantFactory(tenant=people.tenant, resource_class=people.rc, amount=2)
    w = WorkloadFactory(
        tenant=people.tenant,
        name="train-7",
        submitted_by=people.member,
        resources={people.rc.slug: 2},
        command=["python", "train.py"],
        args=["--msg", "hello world"],
        state=Workload.State.PENDING,
    )
    page = browser.new_page(viewport=PHONE)
    refused = csp_refusals(page)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/workloads/{w.pk}/")
    badge = page.locator("#state-badge")
    expect(badge).to_have_text("Pending")
    expect(page.locator("dl.facts").last).to_contain_text("python train.py --msg 'hello world'")
    expect(page.locator("#logs")).to_contain_text("No logs: they appear once")
    expect(page.locator("#logs")).not_to_contain_text("404")
    assert_accessible(page)
    started = timezone.now() - timedelta(minutes=30)
    Workload.objects.filter(pk=w.pk).update(
        state=Workload.State.RUNNING, reason="Running", started_at=started
    )
    # metering saw its pod hold the 2 units for those 30 minutes (the cost is what is billed)
    AllocationInterval.objects.create(
        cluster=Cluster.objects.get_or_create(name="local")[0], pod_uid="p-0",
        namespace=people.tenant.namespace, pod_name="train-7-0", node_name="n", workload=w,
        tenant=people.tenant, resource_class=people.rc, resource_name=people.rc.resource_name,
        units=2, started_at=started, last_seen_at=started + timedelta(minutes=30),
    )  # fmt: skip
    expect(badge).to_have_text("Running", timeout=10_000)  # no reload: the block polls
    state = page.locator("#workload-state")
    expect(state.get_by_role("heading")).to_have_text("State Running")  # not "Running · Running"
    expect(state).to_contain_text("30 min")
    # 2 × 1.50/h for the half hour metering saw, what the statement bills for it
    expect(state).to_contain_text("1.50 USD so far")
    expect(state).to_contain_text("billed to the team")
    Workload.objects.filter(pk=w.pk).update(
        state=Workload.State.CANCELLED, reason="Cancelled", finished_at=timezone.now()
    )
    expect(badge).to_have_text("Cancelled", timeout=10_000)
    expect(state.get_by_role("heading")).to_have_text("State Cancelled")
    expect(state).not_to_have_attribute("hx-trigger", "every 3s")  # finished: polling stops
    page.goto(f"{live_server.url}/teams/team-a/workloads/")
    expect(page.locator("table tbody tr").first.locator("td").nth(2)).to_have_text("Cancelled")
    page.goto(f"{live_server.url}/workloads/{w.pk}/")
    page.get_by_role("link", name="Run again…").click()
    expect(page.get_by_label("Command")).to_have_value("python train.py --msg 'hello world'")
    expect(page.get_by_label("Units per pod")).to_have_value("2")
    page.get_by_role("button", name="Submit").click()
    expect(page.get_by_text("train-7 submitted")).to_be_visible()
    again = Workload.objects.exclude(pk=w.pk).get()
    assert (again.command, again.args) in (
        (["python", "train.py", "--msg", "hello world"], []),
        (["python", "train.py"], ["--msg", "hello world"]),
    )
    assert refused == []


def test_a_short_job_shows_its_run_time_and_history_on_the_open_page(live_server, browser, people):  # noqa: F811
    """Issue 35, 6: a job done between two looks of the sync, on a page left open."""
    w = WorkloadFactory(
        tenant=people.tenant,
        name="sleep-5",
        submitted_by=people.member,
        resources={people.rc.slug: 2},
        state=Workload.State.PENDING,
        created_at=timezone.now() - timedelta(minutes=1),
    )
    WorkloadEvent.objects.create(
        workload=w, created_at=w.created_at, state=w.state, reason="Submitted"
    )
    page = browser.new_page(viewport=PHONE)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/workloads/{w.pk}/")
    history = page.locator("#workload-history")
    expect(history.locator("li")).to_have_count(1)
    start = timezone.now().replace(microsecond=0) - timedelta(seconds=10)
    change_state(
        w.pk,
        Observation(
            Workload.State.SUCCEEDED,
            "Completed",
            started_at=start,
            finished_at=start + timedelta(seconds=5),
        ),
    )
    expect(page.locator("#state-badge")).to_have_text("Succeeded", timeout=10_000)  # no reload
    state = page.locator("#workload-state")
    expect(state).to_contain_text(re.compile(r"Run time\s*5 s"))
    expect(state).to_contain_text("0.00 USD")  # no pod of it was seen by metering
    expect(history.locator("li")).to_have_count(3)
    expect(history.locator("li").nth(1)).to_contain_text("Running")
    expect(history.locator("li").nth(2)).to_contain_text("Succeeded")
    assert_accessible(page)


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_the_channel_form_keeps_what_was_typed_and_fits_its_example_to_the_kind(
    live_server,
    browser,  # noqa: F811
    people,
    viewport,
):
    """Issue 35, 10: the notification channel form after a refusal, and its address example."""
    page = browser.new_page(viewport=viewport)
    refused = csp_refusals(page)
    sign_in(page, live_server.url, "owner")
    page.goto(f"{live_server.url}/teams/team-a/notifications/")
    form = page.locator("#add-channel")
    address = form.get_by_label("Address")
    expect(address).to_have_attribute("placeholder", "ops@example.com, oncall@example.com")
    form.get_by_label("Kind").select_option("webhook")
    expect(address).to_have_attribute("placeholder", "https://hooks.example.com/gpu-portal")
    form.get_by_label("Name").fill("ml-oncall")
    address.fill("ftp://hooks.example.com/in")
    form.get_by_label("A team used its whole monthly budget").check()
    form.get_by_role("button", name="Add channel").click()
    form = page.locator("#add-channel")
    expect(form.locator("#id_target_error")).to_contain_text("The URL must be https://")
    expect(form.get_by_label("Name")).to_have_value("ml-oncall")
    expect(form.get_by_label("Address")).to_have_value("ftp://hooks.example.com/in")
    expect(form.get_by_label("Kind")).to_have_value("webhook")
    expect(form.get_by_label("A team used its whole monthly budget")).to_be_checked()
    expect(form.get_by_label("Address")).to_be_focused()  # page.js: the first field in error
    assert_accessible(page)
    assert no_sideways_scroll(page)
    assert refused == []


# --- (4) one vocabulary, (7) "free" explained, (8) honest charts -------------------------------


def test_display_names_grants_first_unused_quota_and_a_one_hour_chart(
    live_server,
    browser,  # noqa: F811
    people,
):
    QuotaGrantFactory(tenant=people.tenant, resource_class=people.rc, amount=3)
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
    page = browser.new_page(viewport=PHONE)
    refused = csp_refusals(page)
    sign_in(page, live_server.url, "member")
    page.goto(f"{live_server.url}/teams/team-a/")
    quota = page.locator("table.quota")
    expect(quota.locator("thead")).to_contain_text("Unused quota")
    expect(page.get_by_text("quota is a promise, not a reserved GPU")).to_be_visible()
    page.goto(f"{live_server.url}/teams/team-a/workloads/new/")
    groups = page.locator("#id_resource_class optgroup")
    expect(groups.first).to_have_attribute("label", "Team-A's quota")
    expect(groups.first.locator("option")).to_have_text(
        ["A100-80GB MIG 3g.40gb · 2 × 3g.40gb (= 6 of 9 slices) free"]
    )
    page.goto(f"{live_server.url}/usage/teams/team-a/")
    chart = page.locator("section[aria-labelledby='chart-h'] figure").first
    expect(chart.locator("figcaption")).to_have_text("A100-80GB MIG 3g.40gb")
    expect(chart).to_contain_text("Only 1 hour of data so far")
    expect(page.locator("a", has_text="→")).to_have_count(0)  # no link to a month to come
    expect(page.locator("a", has_text="←")).to_have_count(1)
    assert_accessible(page)
    assert no_sideways_scroll(page) and refused == []


def test_ask_for_more_from_a_quota_row_and_see_my_asks(live_server, browser, people):  # noqa: F811
    QuotaGrantFactory(tenant=people.tenant, resource_class=people.rc, amount=4)
    running_workload(people, units=1)
    decided = pending(people, people.tenant, why="decided")
    request_services.reject_capacity_request(actor=people.admin, request=decided, comment="not now")
    page = browser.new_page(viewport=PHONE)
    sign_in(page, live_server.url, "member")
    asks = page.locator("section[aria-labelledby='my-asks-h']")
    expect(asks).to_contain_text(f"#{decided.pk} for Team-A Rejected")
    page.goto(f"{live_server.url}/teams/team-a/")
    row = page.locator("table.quota tbody tr").first
    expect(row.locator("td").nth(4)).to_have_text("25 %")  # 1 of 4 in use
    row.get_by_role("link", name="Ask for more A100-80GB MIG 3g.40gb").click()
    expect(page.get_by_label("GPU model and profile")).to_have_value(str(people.rc.pk))
    expect(page.locator("#hint")).to_contain_text("1 × A100-80GB MIG 3g.40gb")  # at once
    assert_accessible(page)
