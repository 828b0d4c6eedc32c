"""Input that used to be a 500 (issue 13): every one is a 4xx JSON error `{code, detail, errors}`
that says what to change."""

import pytest

from core.models import IdempotencyRecord
from scheduler.workloads.models import Workload
from tenants.models import CapacityRequest, Tenant
from tenants.services import tokens as token_services
from tests.portal.api.conftest import bearer, session
from tests.tenants.factories import UserFactory

pytestmark = pytest.mark.django_db


def assert_json_error(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"] == "application/json", response.content[:500]
    body = response.json()
    assert set(body) == {"code", "detail", "errors"}, body
    if code is not None:
        assert body["code"] == code, body
    return body


def workload(world, **extra):
    return {
        "tenant": world.tenant.slug,
        "name": "bad-input",
        "kind": "job",
        "image": "busybox:1.36",
        "resources": {world.rc.slug: 1},
        "priority": "gpu-low",
        **extra,
    }


# --- deeply nested JSON --------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [100_000, 5_000, 200])
def test_deeply_nested_json_is_a_400_not_a_500(api, depth):
    nested = '{"tenant": ' + "[" * depth + "]" * depth + "}"
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/", data=nested, content_type="application/json"
    )
    body = assert_json_error(response, 400, "parse_error")
    assert "nested" in body["detail"] and "levels" in body["detail"]


def test_a_body_nested_as_deep_as_the_limit_is_still_read(api, world):
    from core.api.parsers import MAX_JSON_DEPTH

    # the body itself is level 1, env level 2: a value MAX_JSON_DEPTH - 2 lists deeper is allowed
    deep = "[" * (MAX_JSON_DEPTH - 2) + "]" * (MAX_JSON_DEPTH - 2)
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/",
        data='{"tenant": "team-a", "env": {"A": ' + deep + "}}",
        content_type="application/json",
    )
    # read, then refused by the serializer for what it says, not for how deep it is
    assert_json_error(response, 400, "invalid")


# --- NUL characters (PostgreSQL refuses them in text) --------------------------------------------


def test_a_nul_in_a_workload_resources_key_is_a_400(api, world):
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/", workload(world, resources={"a100\x00": 1}), format="json"
    )
    body = assert_json_error(response, 400, "invalid")
    assert "resources" in body["errors"], body
    assert "NUL" in body["detail"] or "NUL" in str(body["errors"])
    assert not Workload.objects.filter(name="bad-input").exists()


def test_a_nul_in_a_capacity_request_items_key_is_a_400(api, world):
    response = bearer(api.raw["all"]).post(
        "/api/v1/capacity-requests/",
        {"tenant": "team-a", "items": {"\x00": 1}, "ends_at": None, "justification": "x"},
        format="json",
    )
    body = assert_json_error(response, 400, "invalid")
    assert "items" in body["errors"], body
    assert CapacityRequest.objects.count() == 1  # the fixture's only


def test_a_nul_deep_in_a_body_names_where_it_is(api, world):
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/", workload(world, env={"A": "x", "B\x00": "y"}), format="json"
    )
    body = assert_json_error(response, 400, "invalid")
    assert list(body["errors"]) == ["env"], body


def test_a_lone_surrogate_in_a_key_is_a_400(api, world):
    # valid JSON, but not text PostgreSQL (UTF-8) can hold
    response = bearer(api.raw["all"]).post(
        "/api/v1/capacity-requests/",
        data='{"tenant": "team-a", "items": {"\\ud800": 1}, "ends_at": null, "justification": "x"}',
        content_type="application/json",
    )
    body = assert_json_error(response, 400, "invalid")
    assert "items" in body["errors"], body


def test_a_nul_in_a_form_encoded_key_is_a_400(api, world):
    response = bearer(api.raw["all"]).post(
        "/api/v1/capacity-requests/",
        data="tenant=team-a&items.a%00=1&justification=x&ends_at=",
        content_type="application/x-www-form-urlencoded",
    )
    assert_json_error(response, 400, "invalid")


@pytest.mark.parametrize(
    "method, path",
    [
        ("get", "/api/v1/tenants/team%00a/"),
        ("post", "/api/v1/tenants/team%00a/suspend/"),
        ("get", "/api/v1/usage/statements/team%00a/"),
        ("get", "/api/v1/usage/statements/team%00a/csv/"),
    ],
)
def test_a_nul_in_a_url_slug_is_a_400(api, world, method, path):
    # a session of a platform admin: every scope, so the lookup is what answers
    response = getattr(session(world.admin), method)(path)
    body = assert_json_error(response, 400, "invalid")
    assert "NUL" in body["detail"]


def test_a_nul_in_the_idempotency_key_is_a_400(api, world):
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/", workload(world), format="json", HTTP_IDEMPOTENCY_KEY="k\x00"
    )
    body = assert_json_error(response, 400, "invalid")
    assert "Idempotency-Key" in body["detail"]
    assert not Workload.objects.filter(name="bad-input").exists()
    assert not IdempotencyRecord.objects.exists()


# --- a body over the upload limit ----------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_a_body_over_the_upload_limit_is_a_json_413(api, world, settings, content_type):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    data = (
        '{"justification": "' + "x" * 2000 + '"}'
        if content_type == "application/json"
        else "justification=" + "x" * 2000
    )
    response = bearer(api.raw["all"]).post(
        "/api/v1/capacity-requests/", data=data, content_type=content_type
    )
    body = assert_json_error(response, 413, "request_too_large")
    assert "1000 bytes" in body["detail"]


def test_a_request_django_refuses_before_the_api_sees_it_is_json_too(api):
    # refused by Django's own checks (ALLOWED_HOSTS), outside any API view
    response = bearer(api.raw["all"]).get("/api/v1/tenants/", HTTP_HOST="elsewhere.example")
    body = assert_json_error(response, 400, "bad_request")
    assert "elsewhere.example" not in body["detail"]  # nothing of the configuration is echoed


def test_a_page_outside_the_api_keeps_djangos_answer(client, db, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = client.post("/accounts/login/", {"username": "x" * 2000, "password": "y"})
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")


# --- a tenant whose robot's username is taken ----------------------------------------------------


def test_a_tenant_whose_robot_username_is_taken_is_a_400_via_the_api(api, world):
    UserFactory(username="robot-vision")
    _, raw = token_services.issue_token(
        actor=world.admin, user=world.admin, name="adm", scopes=["read", "approve"]
    )
    response = bearer(raw).post(
        "/api/v1/tenants/", {"slug": "vision", "name": "Vision"}, format="json"
    )
    body = assert_json_error(response, 400, "invalid")
    assert "robot-vision" in body["detail"] and "another slug" in body["detail"]
    assert body["errors"] == {"slug": [body["detail"]]}
    assert not Tenant.objects.filter(slug="vision").exists()


def test_a_null_need_and_no_resources_is_a_400_that_names_the_field(api, world):
    """Found by the schema fuzz: `"need": null` alone reached the service with no ask (500)."""
    body = workload(world, name="no-ask", need=None)
    del body["resources"]
    answer = bearer(api.raw["all"]).post("/api/v1/workloads/", body, format="json")
    errors = assert_json_error(answer, 400)["errors"]
    assert "exactly one of them" in str(errors["resources"])


def test_a_form_whose_resources_parse_to_nothing_is_a_400(api, world):
    """A form-encoded `resources=x` is no ask: refused with the field named, not a 500."""
    body = workload(world, name="form-ask", resources="x")
    answer = bearer(api.raw["all"]).post("/api/v1/workloads/", body)  # multipart, as a form
    errors = assert_json_error(answer, 400)["errors"]
    assert "Expected a dictionary" in str(errors["resources"])
    assert not Workload.objects.filter(name="form-ask").exists()
