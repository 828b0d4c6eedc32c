"""A platform admin creates a department from the console (issue 49, 9), not only in the admin
site or by API: the form keeps what was typed and marks the field the service refuses, and
only platform admins reach it; it reads well at both widths (axe-core)."""

import pytest
from django.test import Client
from playwright.sync_api import expect

from tenants.models import AuditEvent, Department
from tests.portal.test_browser_ux import (  # noqa: F401 (fixture)
    DESKTOP,
    PHONE,
    assert_accessible,
    no_sideways_scroll,
    people,
    sign_in,
)

URL = "/console/departments/new/"


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_a_platform_admin_creates_a_department_audited(world):
    response = _client(world.admin).post(
        URL,
        {"name": "Research", "slug": "research", "monthly_budget": "5000", "auto_approve": "on"},
    )
    assert response.status_code == 302 and response["Location"] == "/departments/research/"
    department = Department.objects.get(slug="research")
    assert department.name == "Research" and department.auto_approve
    assert str(department.monthly_budget) == "5000.00"
    assert AuditEvent.objects.filter(verb="department.created").count() == 1


@pytest.mark.django_db
def test_a_taken_slug_is_marked_and_what_was_typed_is_kept(world):
    Department.objects.create(slug="research", name="Research")
    page = _client(world.admin).post(URL, {"name": "Research 2", "slug": "research"})
    body = page.content.decode()
    assert page.status_code == 200
    assert "already exists" in body[body.index('id="id_slug_error"') :].split("</div>")[0]
    assert 'id="id_slug_error"' in body and 'value="Research 2"' in body


@pytest.mark.django_db
def test_only_platform_admins_reach_it(world):
    assert _client(world.owner).get(URL).status_code == 403
    assert _client(world.owner).post(URL, {"name": "X", "slug": "x"}).status_code == 403
    assert not Department.objects.exists()
    listing = _client(world.admin).get("/departments/").content.decode()
    assert f'href="{URL}"' in listing
    assert f'href="{URL}"' not in _client(world.owner).get("/departments/").content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_the_form_from_the_department_list_at_both_widths(live_server, browser, people, viewport):  # noqa: F811
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/departments/")
    page.get_by_role("link", name="New department").first.click()
    expect(page.get_by_role("heading", name="New department")).to_be_visible()
    assert_accessible(page)
    page.get_by_label("Name").fill("Research")
    page.get_by_label("Slug").fill("Not a slug!")
    page.get_by_role("button", name="Create department").click()
    expect(page.get_by_label("Name")).to_have_value("Research")  # kept
    expect(page.locator("#id_slug_error")).to_be_visible()
    assert_accessible(page)
    page.get_by_label("Slug").fill("research")
    page.get_by_role("button", name="Create department").click()
    expect(page.get_by_text("Department Research created.")).to_be_visible()
    assert no_sideways_scroll(page)
    assert_accessible(page)
