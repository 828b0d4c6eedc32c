"""Booking ahead through its faces (issue 52): the ask form's start and its errors, the live
hint, the calendar pages of the team and the console, and the API's calendar, window and
grant-end actions. The clock is fixed."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.urls import reverse
from rest_framework.test import APIClient

from tenants.models import AuditEvent, CapacityRequest, QuotaGrant
from tenants.services import approvals as approval_services
from tenants.services import requests as request_services
from tests.tenants.factories import QuotaGrantFactory
from tests.tenants.test_services import Snapshot

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(NOW, tick=False):
        yield


def booked(world, tenant, amount, start_day, end_day):
    request = request_services.submit_capacity_request(
        actor=world.admin,
        tenant=tenant,
        items={world.rc.slug: amount},
        starts_at=NOW + start_day * DAY,
        ends_at=NOW + end_day * DAY,
        justification="the run",
    )
    return approval_services.approve_capacity_request(actor=world.admin, request=request)


def local(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M")  # the test settings' zone is UTC


def form(world, **fields):
    return {
        "resource_class": world.rc.pk,
        "amount": 2,
        "duration": "custom",
        "justification": "train",
        **fields,
    }


def test_the_ask_form_books_ahead(client, world):
    client.force_login(world.member)
    response = client.post(
        reverse("tenants:request_create", args=["team-a"]),
        form(world, starts_at=local(NOW + 3 * DAY), ends_at=local(NOW + 5 * DAY)),
    )
    assert response.status_code == 302
    request = CapacityRequest.objects.get()
    assert (request.starts_at, request.ends_at) == (NOW + 3 * DAY, NOW + 5 * DAY)


def test_a_preset_duration_counts_from_the_start(client, world):
    client.force_login(world.member)
    client.post(
        reverse("tenants:request_create", args=["team-a"]),
        form(world, starts_at=local(NOW + 3 * DAY), duration="1d"),
    )
    request = CapacityRequest.objects.get()
    assert request.ends_at == NOW + 4 * DAY


@pytest.mark.parametrize(
    ("starts", "ends", "field", "says"),
    [
        (-DAY, 2 * DAY, "starts_at", "start must not be in the past"),
        (3 * DAY, 2 * DAY, "ends_at", "end must be after the start"),
        (400 * DAY, 401 * DAY, "starts_at", "booked at most 365 days ahead"),
    ],
)
def test_a_bad_window_is_a_clear_form_error_that_stores_nothing(
    client, world, starts, ends, field, says
):
    client.force_login(world.member)
    before = Snapshot()
    response = client.post(
        reverse("tenants:request_create", args=["team-a"]),
        form(world, starts_at=local(NOW + starts), ends_at=local(NOW + ends)),
    )
    assert response.status_code == 200
    assert says in str(response.context["form"].errors[field])
    assert before.unchanged()


def test_the_hint_says_a_booking_and_shows_the_class_over_the_coming_weeks(client, world):
    booked(world, world.other_tenant, 10, 3, 5)
    client.force_login(world.member)
    hint = client.get(
        reverse("tenants:request_preview", args=["team-a"]),
        {
            "resource_class": world.rc.pk,
            "amount": 1,
            "duration": "custom",
            "starts_at": local(NOW + 4 * DAY),
            "ends_at": local(NOW + 6 * DAY),
        },
    ).content.decode()
    assert "This ask would be refused" in hint
    assert "earliest window of the same length that fits is from 2026-12-12 09:00" in hint
    assert 'id="ask-calendar"' in hint and "10 booked" in hint


def test_the_team_calendar_shows_its_own_bookings_and_another_team_gets_a_404(client, world):
    booked(world, world.tenant, 4, 3, 5)
    client.force_login(world.member)
    page = client.get(reverse("tenants:team_calendar", args=["team-a"])).content.decode()
    assert "yours: 4" in page and "4 booked" in page
    assert "is stopped after 15 minutes" in page  # said before it happens
    assert client.get(reverse("tenants:team_calendar", args=["team-b"])).status_code == 404


def test_the_console_calendar_names_the_teams_and_draws_the_backlog(client, world):
    booked(world, world.other_tenant, 6, 1, 3)
    request_services.submit_capacity_request(
        actor=world.member,
        tenant=world.tenant,
        items={world.rc.slug: 3},
        starts_at=NOW + 2 * DAY,
        ends_at=NOW + 4 * DAY,
        justification="waits",
    )
    client.force_login(world.admin)
    page = client.get(reverse("console:calendar")).content.decode()
    assert "team-b" in page and "3 waiting" in page
    client.force_login(world.member)
    assert client.get(reverse("console:calendar")).status_code in (302, 403, 404)


def api(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def test_the_api_calendar_returns_the_same_series(world):
    booked(world, world.tenant, 4, 3, 5)
    QuotaGrantFactory(tenant=world.other_tenant, resource_class=world.rc, amount=2, ends_at=None)
    body = (
        api(world.member)
        .get("/api/v1/capacity-calendar/", {"resource_class": world.rc.slug, "tenant": "team-a"})
        .json()
    )
    [cal] = body["calendars"]
    assert len(cal["days"]) == 56 and cal["grantable"] == 10
    day3 = cal["days"][3]
    assert (day3["free"], day3["granted"], day3["booked"], day3["own"]) == (4, 2, 4, 4)
    assert day3["teams"] == []  # who holds what is the platform team's to see
    assert cal["open_ended"] == ["2 units"]
    wrong = api(world.member).get("/api/v1/capacity-calendar/", {"tenant": "team-b"})
    assert wrong.status_code == 404
    bad = api(world.member).get("/api/v1/capacity-calendar/", {"weeks": 99})
    assert bad.status_code == 400 and "weeks" in bad.json()["errors"]


def test_the_api_refuses_a_bad_window_with_a_400_at_its_field(world):
    before = Snapshot()
    response = api(world.member).post(
        "/api/v1/capacity-requests/",
        {
            "tenant": "team-a",
            "items": {world.rc.slug: 1},
            "starts_at": (NOW - DAY).isoformat(),
            "ends_at": (NOW + DAY).isoformat(),
            "justification": "x",
        },
        format="json",
    )
    assert response.status_code == 400
    assert "choose now or a later start" in response.json()["errors"]["starts_at"][0]
    assert before.unchanged()


def test_the_platform_team_gives_an_open_ended_grant_an_end_by_api(world):
    grant = QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, amount=2, ends_at=None)
    url = f"/api/v1/grants/{grant.pk}/set-end/"
    refused = api(world.member).post(url, {"ends_at": (NOW + DAY).isoformat()}, format="json")
    assert refused.status_code == 403
    done = api(world.admin).post(url, {"ends_at": (NOW + DAY).isoformat()}, format="json")
    assert done.status_code == 200, done.json()
    grant.refresh_from_db()
    assert grant.ends_at == NOW + DAY and grant.state == QuotaGrant.State.ACTIVE
    assert AuditEvent.objects.filter(verb="quota_grant.end_set", object_id=str(grant.pk)).exists()


def test_the_approval_queue_shows_a_bookings_start(client, world):
    request_services.submit_capacity_request(
        actor=world.member,
        tenant=world.tenant,
        items={world.rc.slug: 1},
        starts_at=NOW + 3 * DAY,
        ends_at=NOW + 5 * DAY,
        justification="later",
    )
    client.force_login(world.admin)
    page = client.get(reverse("console:queue")).content.decode()
    assert "from 10 Dec 2026" in page and "12 Dec 2026" in page
