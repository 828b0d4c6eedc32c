"""The portal's own error pages (issue 49, 1): a mistyped, forbidden or malformed address and a
bug answer a page with the portal's header and a way back, in every settings module, never
Django's debug page or its bare defaults; pages read well at both widths (axe-core)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client, RequestFactory
from playwright.sync_api import expect

from portal.views import server_error
from tests.portal.test_browser_ux import (  # noqa: F401 (fixture)
    DESKTOP,
    PHONE,
    assert_accessible,
    no_sideways_scroll,
    people,
    sign_in,
)

ROOT = Path(settings.BASE_DIR)


@pytest.mark.parametrize("module", ["dev", "test", "prod"])
def test_no_settings_module_shows_the_debug_page_by_default(module):
    env = {k: v for k, v in os.environ.items() if k != "DEBUG"}
    env.update(DJANGO_SETTINGS_MODULE=f"portal.settings.{module}", SECRET_KEY="x" * 50)
    done = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.DEBUG)"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "False"


@pytest.mark.django_db
def test_a_missing_page_is_the_portals_own_with_its_navigation(world):
    client = Client()
    client.force_login(world.member)
    response = client.get("/teams/no-such-team/")
    page = response.content.decode()
    assert response.status_code == 404
    assert "Page not found" in page and 'aria-label="Main"' in page  # the portal's navigation
    assert "/teams/no-such-team/" in page and 'href="/"' in page


@pytest.mark.django_db
def test_a_forbidden_page_says_why_and_the_way_on(world):
    client = Client()
    client.force_login(world.member)
    response = client.get("/console/")
    page = response.content.decode()
    assert response.status_code == 403
    assert "You cannot do this" in page and 'aria-label="Main"' in page
    assert "The platform console is for platform admins." in page


@pytest.mark.django_db
def test_a_malformed_request_is_the_portals_400_page():
    response = Client(HTTP_HOST="evil.example.com").get("/")
    page = response.content.decode()
    assert response.status_code == 400
    assert "could not read this request" in page and "GPU Portal" in page


@pytest.mark.django_db
def test_an_expired_form_is_the_portals_403_page(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.member)
    response = client.post("/accounts/logout/")
    assert response.status_code == 403
    assert "This form expired" in response.content.decode()


@pytest.mark.django_db
def test_a_bug_is_the_portals_500_page_with_the_request_id(world):
    request = RequestFactory().get("/teams/team-a/")
    request.user = world.member
    request.request_id = "abc123"
    try:
        raise KeyError("bug")
    except KeyError:
        response = server_error(request)
    page = response.content.decode()
    assert response.status_code == 500
    assert "An unexpected error" in page and "abc123" in page and 'aria-label="Main"' in page


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_error_pages_read_well_at_both_widths(live_server, browser, people, viewport):  # noqa: F811
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "member")
    for path, heading in [
        ("/no-such-page/", "Page not found"),
        ("/console/", "You cannot do this"),
    ]:
        page.goto(f"{live_server.url}{path}")
        expect(page.get_by_role("heading", level=1)).to_have_text(heading)
        expect(page.get_by_role("link", name="Go to My teams")).to_be_visible()
        expect(page.locator("header.top .brand")).to_be_visible()
        assert no_sideways_scroll(page)
        assert_accessible(page)
        page.get_by_role("link", name="Go to My teams").click()
        expect(page.get_by_role("heading", name="My teams")).to_be_visible()
