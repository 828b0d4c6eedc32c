"""The pages in headless Chromium under the Content-Security-Policy: nothing is refused, htmx
still swaps, Swagger UI and the Django admin still work. (The usage pages' charts:
tests/metering/test_browser.py.)"""

import pytest
from playwright.sync_api import expect

from tests.portal.test_browser import csp_refusals, sign_in
from tests.tenants.factories import PlatformAdminFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def people(world):
    for user in (world.member, PlatformAdminFactory(username="pat")):
        user.set_password("pw")
        user.save()
    return world


def test_htmx_still_swaps_the_request_forms_hint(live_server, browser, people):  # noqa: F811
    page = browser.new_page()
    refused = csp_refusals(page)
    sign_in(page, live_server.url, people.member.username)
    page.goto(f"{live_server.url}/teams/{people.tenant.slug}/ask/")
    page.get_by_label("GPU model and profile").select_option(str(people.rc.pk))
    page.get_by_label("Amount").fill("1")
    expect(page.locator("#hint")).to_contain_text("free in the pool")
    assert page.locator("style").count() == 0  # htmx added no indicator stylesheet
    assert refused == []


def test_swagger_ui_and_the_admin_work_under_the_policy(live_server, browser, people):  # noqa: F811
    page = browser.new_page()
    refused = csp_refusals(page)
    page.goto(f"{live_server.url}/api/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("GPU Portal API")
    expect(page.locator(".opblock").first).to_be_visible()
    sign_in(page, live_server.url, "pat")
    page.goto(f"{live_server.url}/admin/")
    expect(page.locator("#site-name")).to_contain_text("GPU Portal")
    page.goto(f"{live_server.url}/usage/platform/")
    page.goto(f"{live_server.url}/console/")
    assert refused == []
