"""Fuzz every operation of the OpenAPI schema with schemathesis, through Django's WSGI app, as a
platform admin's token with every scope (so that the calls reach the services, not just the
permission check): no 500, and every response matches what the schema says about it.

Bounded and deterministic: at most 25 examples per operation, a fixed seed, no example database.
"""

import hypothesis
import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from schemathesis import checks

from tenants import services
from tenants.api.throttling import PerTokenThrottle
from tests.portal.api.conftest import bearer

pytestmark = pytest.mark.django_db

CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
]


# The schema as the portal serves it, and the app that serves it (no server, no socket).
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())


@pytest.fixture(autouse=True)
def keep_the_test_connection():
    """Like Django's test client: the app must not close the test's connection (and so its
    transaction) at the end of each request."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def admin_token(api, monkeypatch):
    """A token with every scope, in a world with one object of every kind (the `api` fixture)."""
    monkeypatch.setattr(PerTokenThrottle, "rate", "1000000/min", raising=False)
    world = api.world
    _, raw = services.issue_token(
        actor=world.admin,
        user=world.admin,
        name="fuzz",
        scopes=["read", "request", "submit", "approve"],
    )
    return raw


@schema.parametrize()
@hypothesis.settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)
@hypothesis.seed(20261130)
def test_no_500_and_no_response_that_breaks_the_schema(case, admin_token):
    case.call_and_validate(headers={"Authorization": f"Bearer {admin_token}"}, checks=CHECKS)


# --- what the fuzz found, pinned ------------------------------------------------------------------


def test_a_date_time_with_an_offset_postgresql_cannot_take_is_a_result_not_a_500(api):
    client = bearer(api.raw["read"])
    # +19:48 is valid ISO 8601 but beyond PostgreSQL's ±15:59: it is compared in UTC.
    late = client.get("/api/v1/audit-events/", {"since": "2946-04-27T10:01:39+19:48"})
    assert late.status_code == 200, late.content
    assert late.data["count"] == 0
    early = client.get("/api/v1/audit-events/", {"since": "2000-01-01T00:00:00+18:00"})
    assert early.status_code == 200 and early.data["count"] >= 1


@pytest.mark.parametrize("method", ["get", "post"])
def test_a_path_no_route_matches_is_a_json_404(api, method):
    response = getattr(bearer(api.raw["all"]), method)("/api/v1/workloads/0.5/cancel/")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "not_found"


def test_every_operation_documents_its_errors(api):
    schema = bearer(api.raw["read"]).get("/api/schema/?format=json").json()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            documented = set(operation["responses"])
            assert {"400", "401", "403", "404", "429"} <= documented, (method, path)
            if method != "get" or path.endswith("/logs/"):
                assert "409" in documented, (method, path)
    assert schema["components"]["schemas"]["Error"]["required"] == ["code", "detail", "errors"]
