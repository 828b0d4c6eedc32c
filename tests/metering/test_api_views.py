"""API and pages of metering: generic access (anonymous 401, another tenant 404, right caller
200), and the same numbers on the page, in the CSV/JSON export and in the API."""

import csv
import io
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from metering import selectors
from metering.models import AllocationInterval
from scheduler.cluster.models import Cluster
from tenants.services import tokens as token_services
from tests.portal.api.conftest import bearer, session

pytestmark = pytest.mark.django_db


@pytest.fixture
def usage(world):
    now = timezone.now()
    cluster = Cluster.objects.create(name="local")
    start = max(
        now - timedelta(hours=3),
        selectors.month_window_until(selectors.current_month(now), now).start,
    )
    iv = AllocationInterval.objects.create(
        cluster=cluster,
        pod_uid="u1",
        namespace="ns-a",
        pod_name="train-0",
        node_name="n",
        tenant=world.tenant,
        resource_class=world.rc,
        resource_name=world.rc.resource_name,
        units=2,
        started_at=start,
        last_seen_at=now - timedelta(minutes=1),
    )
    _, raw = token_services.issue_token(
        actor=world.member, user=world.member, name="read", scopes=["read"]
    )
    _, outsider_raw = token_services.issue_token(
        actor=world.outsider, user=world.outsider, name="o", scopes=["read"]
    )
    return {"interval": iv, "raw": raw, "outsider": outsider_raw}


def detail_urls(world, usage):
    return [
        f"/api/v1/usage/statements/{world.tenant.slug}/",
        f"/api/v1/usage/statements/{world.tenant.slug}/csv/",
        f"/api/v1/usage/intervals/{usage['interval'].pk}/",
    ]


LISTS = [
    "/api/v1/usage/statements/",
    "/api/v1/usage/intervals/",
    "/api/v1/usage/budgets/",
    "/api/v1/usage/prices/",
]


def test_anonymous_gets_401(world, usage):
    for url in LISTS + detail_urls(world, usage):
        assert APIClient().get(url).status_code == 401, url


def test_another_tenant_gets_404_and_sees_nothing(world, usage):
    for client in (session(world.outsider), bearer(usage["outsider"])):
        for url in detail_urls(world, usage):
            response = client.get(url)
            assert response.status_code == 404, url
            assert response.json()["code"] == "not_found"
        listed = client.get("/api/v1/usage/statements/").json()["results"]
        assert [s["tenant"] for s in listed] == ["team-b"]
        assert client.get("/api/v1/usage/intervals/").json()["count"] == 0
    assert Client().get(f"/usage/teams/{world.tenant.slug}/").status_code == 302  # sign in
    browser = Client()
    browser.force_login(world.outsider)
    assert browser.get(f"/usage/teams/{world.tenant.slug}/").status_code == 404
    assert browser.get(f"/usage/teams/{world.tenant.slug}/statement.csv").status_code == 404
    assert browser.get("/usage/platform/").status_code == 403


def test_page_export_and_api_show_the_same_numbers(world, usage):
    month = f"{selectors.current_month():%Y-%m}"
    api = bearer(usage["raw"]).get(f"/api/v1/usage/statements/{world.tenant.slug}/?month={month}")
    assert api.status_code == 200
    body = api.json()
    (line,) = body["lines"]
    assert line["resource_class"] == world.rc.slug
    expected = selectors.tenant_statement(world.tenant, selectors.current_month())
    assert body["totals"]["total"] == str(expected.total)
    browser = Client()
    browser.force_login(world.member)
    exported = browser.get(f"/usage/teams/{world.tenant.slug}/statement.json?month={month}").json()
    assert exported["lines"] == body["lines"] and exported["totals"] == body["totals"]
    rows = list(
        csv.DictReader(
            io.StringIO(
                browser.get(
                    f"/usage/teams/{world.tenant.slug}/statement.csv?month={month}"
                ).content.decode()
            )
        )
    )
    assert rows[0]["allocated_cost"] == line["allocated_cost"] and rows[0]["tenant"] == "team-a"
    page = browser.get(f"/usage/teams/{world.tenant.slug}/?month={month}")
    assert page.status_code == 200
    html = page.content.decode()
    assert line["allocated_cost"] in html and line["allocated_hours"] in html
    assert "vendor/chartjs/chart.umd.js" in html
    api_csv = bearer(usage["raw"]).get(
        f"/api/v1/usage/statements/{world.tenant.slug}/csv/?month={month}"
    )
    assert (
        api_csv.content.decode()
        == browser.get(
            f"/usage/teams/{world.tenant.slug}/statement.csv?month={month}"
        ).content.decode()
    )


def test_times_are_shown_in_the_viewers_time_zone(world, usage):
    browser = Client()
    browser.force_login(world.member)
    start = usage["interval"].started_at
    utc = browser.get(f"/usage/teams/{world.tenant.slug}/?tz=UTC").content.decode()
    tokyo = browser.get(f"/usage/teams/{world.tenant.slug}/?tz=Asia/Tokyo").content.decode()
    assert f"{start:%H:%M}" in utc
    assert f"{(start + timedelta(hours=9)):%H:%M}" in tokyo and "JST" in tokyo
    # remembered for the session
    assert "JST" in browser.get(f"/usage/teams/{world.tenant.slug}/").content.decode()


def test_bad_month_and_basis_are_400(world, usage):
    client = bearer(usage["raw"])
    response = client.get(f"/api/v1/usage/statements/{world.tenant.slug}/?month=soon")
    assert response.status_code == 400 and response.json()["errors"]["month"]
    response = client.get(f"/api/v1/usage/statements/{world.tenant.slug}/?basis=cheapest")
    assert response.status_code == 400


def test_prices_are_set_by_the_platform_team_only(world, usage):
    body = {
        "resource_class": world.rc.slug,
        "price_per_hour": "2.5",
        "effective_from": "2026-12-01T00:00:00Z",
    }
    assert (
        session(world.member).post("/api/v1/usage/prices/", body, format="json").status_code == 403
    )
    assert (
        bearer(usage["raw"]).post("/api/v1/usage/prices/", body, format="json").status_code == 403
    )
    created = session(world.admin).post("/api/v1/usage/prices/", body, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["price_per_hour"] == "2.5000"
    listed = bearer(usage["raw"]).get("/api/v1/usage/prices/").json()
    assert listed["count"] == 1


def test_platform_dashboard_and_chargeback_for_admins(world, usage):
    from metering import rollups
    from metering.models import UsageSample

    UsageSample.objects.create(
        at=timezone.now().replace(second=0, microsecond=0),
        tenant=world.tenant,
        resource_class=world.rc,
        allocated=2,
        known=2,
        used=1,
        quota=4,
    )
    rollups.roll_up_hours()
    rollups.roll_up_days()
    browser = Client()
    browser.force_login(world.admin)
    page = browser.get("/usage/platform/?days=30")
    assert page.status_code == 200 and "really used" in page.content.decode()
    rows = list(
        csv.DictReader(io.StringIO(browser.get("/usage/platform/chargeback.csv").content.decode()))
    )
    assert {r["tenant"] for r in rows} == {"team-a"}
    assert selectors.cost_by_tenant(selectors.current_month())[0][0] == "team-a"


def test_the_team_page_shows_cost_against_budget_and_warns(world, usage, settings):
    from metering import services

    services.set_budget(
        actor=world.admin, tenant=world.tenant, month=selectors.current_month(), amount="1"
    )
    settings.BUDGET_ENFORCE = True
    browser = Client()
    browser.force_login(world.member)
    html = browser.get(f"/teams/{world.tenant.slug}/").content.decode()
    state = selectors.budget_state(world.tenant)
    assert "Cost this month against budget" in html
    assert f"{state.cost} USD" in html and "Over budget" in html
    assert "New workloads are refused" in html


def test_right_caller_gets_200_by_session_and_by_read_token(world, usage):
    for client in (session(world.member), bearer(usage["raw"])):
        for url in LISTS:
            assert client.get(url).status_code == 200, url
        for url in detail_urls(world, usage):
            assert client.get(url).status_code == 200, url
        shown = client.get(f"/api/v1/usage/intervals/{usage['interval'].pk}/").json()
        assert shown["tenant"] == "team-a" and shown["seen_until"] and shown["ended_at"] is None
        listed = client.get("/api/v1/usage/intervals/?open=true&tenant=team-a").json()
        assert [i["pod_name"] for i in listed["results"]] == ["train-0"]
    csv_all = session(world.admin).get("/api/v1/usage/statements/csv/").content.decode()
    assert csv_all.splitlines()[0].startswith("tenant,cost_centre,month")
    assert "team-a" in csv_all
