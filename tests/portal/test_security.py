"""Browser-side safety and bad input on the console (issue 13): a Content-Security-Policy on every
page, no inline script left in a template, and a tampered approval form is a 400 that says why."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from scheduler.mig.models import Plan
from tenants.models import CapacityRequest
from tests.portal.test_pages import ask, login

pytestmark = pytest.mark.django_db

TEMPLATE_DIRS = [Path(settings.BASE_DIR) / "templates"] + [
    path for path in Path(settings.BASE_DIR).glob("*/templates") if path.is_dir()
]


# --- the console's approve / reject form --------------------------------------------------------


@pytest.mark.parametrize("bad", ["abc", "1.5", "", "-1", "١٢", "9" * 20])
def test_a_request_id_that_is_not_one_is_a_400_that_says_so(client, world, bad):
    a = ask(world)
    login(client, world.admin)
    response = client.post(
        reverse("console:decide"), {"request": [a.pk, bad], "action": "approve", "comment": "ok"}
    )
    assert response.status_code == 400
    assert "Select requests from the list" in response.content.decode()
    a.refresh_from_db()
    assert a.state == CapacityRequest.State.SUBMITTED  # nothing decided on a tampered form


def test_good_ids_are_still_decided(client, world):
    a = ask(world)
    login(client, world.admin)
    response = client.post(
        reverse("console:decide"),
        {"request": [str(a.pk)], "action": "approve", "comment": "ok"},
        follow=True,
    )
    assert "Approved 1 request." in response.content.decode()


# --- Content-Security-Policy --------------------------------------------------------------------


def csp_of(response) -> dict[str, list[str]]:
    header = response.headers.get("Content-Security-Policy", "")
    directives = [part.split() for part in header.split(";") if part.strip()]
    return {d[0]: d[1:] for d in directives}


def test_pages_carry_a_strict_content_security_policy(world):
    browser = Client()
    browser.force_login(world.admin)
    for url in (
        "/accounts/login/",
        "/",
        f"/usage/teams/{world.tenant.slug}/",
        "/usage/platform/",
        "/console/",
        "/admin/",
        "/api/docs/",
    ):
        response = browser.get(url)
        assert response.status_code == 200, url
        policy = csp_of(response)
        assert policy["default-src"] == ["'self'"], url
        assert policy["script-src"] == ["'self'"], url
        assert policy["style-src"] == ["'self'"], url
        assert policy["img-src"] == ["'self'", "data:"], url
        assert policy["frame-ancestors"] == ["'none'"], url
        assert policy["form-action"] == ["'self'"], url
        assert policy["base-uri"] == ["'self'"], url
        assert "'unsafe-eval'" not in str(policy), url


def test_swagger_ui_loads_its_start_script_from_a_url():
    html = Client().get("/api/docs/").content.decode()
    assert re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html) is None  # no inline script
    assert "<style" not in html
    script = Client().get("/api/docs/?script=")
    assert script.status_code == 200 and "SwaggerUIBundle" in script.content.decode()
    assert script["Content-Type"].startswith("application/javascript")


INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
# onclick=, onload=, ... (htmx's hx-on too) and javascript: URLs: all need 'unsafe-inline'
INLINE_HANDLER = re.compile(r"""\s(on[a-z]+|hx-on[:\w-]*)\s*=|javascript:""", re.IGNORECASE)


def test_no_template_has_an_inline_script_or_event_handler():
    templates = [p for d in TEMPLATE_DIRS for p in d.rglob("*.html")]
    assert len(templates) > 20  # the scan found the templates
    offenders = []
    for path in templates:
        text = path.read_text()
        if INLINE_SCRIPT.search(text) or INLINE_HANDLER.search(text):
            offenders.append(str(path.relative_to(settings.BASE_DIR)))
    assert offenders == []


def test_the_scan_would_catch_one():
    assert INLINE_SCRIPT.search("<script>alert(1)</script>")
    assert INLINE_SCRIPT.search('<script type="module">x()</script>')
    assert not INLINE_SCRIPT.search('<script src="/static/a.js" defer></script>')
    assert INLINE_HANDLER.search('<button onclick="x()">')
    assert INLINE_HANDLER.search('<form hx-on::after-request="x()">')
    assert INLINE_HANDLER.search('<a href="javascript:x()">')
    assert not INLINE_HANDLER.search('<canvas class="usage-chart" data-slug="a">')


# --- the console's MIG plan form ----------------------------------------------------------------


@pytest.mark.parametrize("weight", ["inf", "1e309", "-inf", "nan"])
def test_an_infinite_large_shape_weight_is_refused_with_the_reason(client, world, weight):
    login(client, world.admin)
    response = client.post(
        reverse("console:plan_create"), {"large_shape_weight": weight}, follow=True
    )
    assert response.status_code == 200
    assert "No plan: the large-shape weight must be a finite number ≥ 0" in (
        response.content.decode()
    )
    assert not Plan.objects.exists()
