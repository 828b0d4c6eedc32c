"""Fuzz every operation of the OpenAPI schema with schemathesis, through Django's WSGI app, as a
platform admin (a token with every scope; signed in where no token is allowed), so that the calls
reach the services, not just the permission check: no 500, and every response matches what the
schema says about it.

Two tests, both bounded and deterministic (a fixed seed, no example database):

- each operation alone: schemathesis' examples, its coverage cases (boundaries, wrong types,
  missing fields, other content types) and generated cases: `WRITE_EXAMPLES` for what takes a
  body or changes state (where bad input does harm), `LIST_EXAMPLES` for lists (their
  filters), `LOOKUP_EXAMPLES` for reading one object by a made-up id (the sequences below
  read real ones);
- sequences (stateful): `STATEFUL_SCENARIOS` runs of up to `STATEFUL_STEPS` calls that feed
  what one call answered into the next, along OpenAPI links: those schemathesis infers from the
  schema (a created or listed id to its detail, approve, reject, cancel, revoke …) and `LINKS`
  below, which carry a tenant's slug into what names a tenant (members, capacity requests,
  workloads, statements, filters).

Both together make about as many calls as the fuzz made before it had sequences (~3,200): the
one-operation part no longer probes every other HTTP method per path (DRF answers them all with
the same 405, pinned below) and sends fewer made-up ids.
"""

import hypothesis
import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from django.test import Client
from schemathesis import checks
from schemathesis.config import SchemathesisConfig

from tenants.api.throttling import PerTokenThrottle
from tenants.services import tokens as token_services
from tests.portal.api.conftest import bearer, session

pytestmark = pytest.mark.django_db

SEED = 20261130
# Generated cases per operation, besides its examples and coverage cases (25 each before).
WRITE_EXAMPLES = 40
LIST_EXAMPLES = 25
LOOKUP_EXAMPLES = 10
STATEFUL_SCENARIOS = 25
STATEFUL_STEPS = 8

CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
]

# What a tenant's slug (from creating, reading or changing a tenant) links to. Schemathesis merges
# a link's `requestBody` into the body it generates, so the rest of the body is still fuzzed.
_TENANT_SLUG = "$response.body#/slug"
_FROM_A_TENANT = {
    "MembersOfTheTenant": {
        "operationId": "members_create",
        "requestBody": {"tenant": _TENANT_SLUG},
    },
    "AskCapacityForTheTenant": {
        "operationId": "capacity_requests_create",
        "requestBody": {"tenant": _TENANT_SLUG},
    },
    "SubmitWorkToTheTenant": {
        "operationId": "workloads_create",
        "requestBody": {"tenant": _TENANT_SLUG},
    },
    "StatementOfTheTenant": {
        "operationId": "usage_statements_retrieve",
        "parameters": {"path.slug": _TENANT_SLUG},
    },
    "StatementCsvOfTheTenant": {
        "operationId": "usage_statements_csv_one",
        "parameters": {"path.slug": _TENANT_SLUG},
    },
    "WorkloadsOfTheTenant": {
        "operationId": "workloads_list",
        "parameters": {"query.tenant": _TENANT_SLUG},
    },
    "AuditOfTheTenant": {
        "operationId": "audit_events_list",
        "parameters": {"query.tenant": _TENANT_SLUG},
    },
}
LINKS = {
    ("/api/v1/tenants/", "post", "201"): _FROM_A_TENANT,
    ("/api/v1/tenants/{slug}/", "get", "200"): _FROM_A_TENANT,
    ("/api/v1/tenants/{slug}/suspend/", "post", "200"): _FROM_A_TENANT,
    ("/api/v1/tenants/{slug}/resume/", "post", "200"): _FROM_A_TENANT,
    ("/api/v1/tenants/{slug}/archive/", "post", "200"): _FROM_A_TENANT,
}


def _add_links(raw: dict) -> None:
    for (path, method, status), links in LINKS.items():
        response = raw["paths"][path][method]["responses"][status]
        response.setdefault("links", {}).update(links)


# The schema as the portal serves it, and the app that serves it (no server, no socket).
schema = schemathesis.openapi.from_wsgi(
    "/api/schema/?format=json",
    get_wsgi_application(),
    config=SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "generation": {"max-examples": LIST_EXAMPLES},
            # Every other method is answered by DRF's one 405 (pinned below): not probed per path.
            "phases": {"coverage": {"unexpected-methods": []}},
            "operations": [
                {
                    "include-method": ["POST", "PATCH", "DELETE"],
                    "generation": {"max-examples": WRITE_EXAMPLES},
                },
                {
                    "include-name-regex": r"^GET .*\{",
                    "generation": {"max-examples": LOOKUP_EXAMPLES},
                },
            ],
        }
    ),
)
_add_links(schema.raw_schema)


@pytest.fixture(autouse=True)
def keep_the_test_connection():
    """Like Django's test client: the app must not close the test's connection (and so its
    transaction) at the end of each request."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


# What no token may do (mint tokens, change members: browser work), the fuzz does signed in.
SESSION_ONLY = frozenset(
    {
        "POST /api/v1/tokens/",
        "POST /api/v1/members/",
        "PATCH /api/v1/members/{id}/",
        "DELETE /api/v1/members/{id}/",
    }
)
CSRF_TOKEN = "fuzz" * 8


@pytest.fixture
def credentials(api, monkeypatch, settings):
    """How a platform admin calls an operation, in a world with one object of every kind (the
    `api` fixture): with a token that has every scope, or signed in (a session and its CSRF
    token) where no token is allowed. Throttling is off: it is tested on its own, and here it
    would only cost time."""
    monkeypatch.setattr(PerTokenThrottle, "allow_request", lambda self, request, view: True)
    world = api.world
    _, raw = token_services.issue_token(
        actor=world.admin,
        user=world.admin,
        name="fuzz",
        scopes=["read", "request", "submit", "approve"],
    )
    browser = Client()
    browser.force_login(world.admin)
    signed_in = {
        "headers": {"X-CSRFToken": CSRF_TOKEN},
        "cookies": {
            settings.SESSION_COOKIE_NAME: browser.cookies[settings.SESSION_COOKIE_NAME].value,
            settings.CSRF_COOKIE_NAME: CSRF_TOKEN,
        },
    }
    with_token = {"headers": {"Authorization": f"Bearer {raw}"}}

    def call_kwargs(case) -> dict:
        return signed_in if case.operation.label in SESSION_ONLY else with_token

    return call_kwargs


@schema.parametrize()
@hypothesis.settings(  # max_examples: from the config above, per operation
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)
@hypothesis.seed(SEED)
def test_no_500_and_no_response_that_breaks_the_schema(case, credentials):
    case.call_and_validate(**credentials(case), checks=CHECKS)


def test_no_500_along_sequences_of_calls_that_follow_the_links(credentials):
    class Sequences(schema.as_state_machine()):
        def setup(self):
            # Each sequence starts from the same world: what one created is rolled back, so
            # that a replayed sequence meets the same answers (Hypothesis requires it).
            self.savepoint = transaction.savepoint()

        def teardown(self):
            transaction.savepoint_rollback(self.savepoint)

        def get_call_kwargs(self, case):
            return credentials(case)

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=CHECKS, headers=kwargs.get("headers"))

    Sequences.run(
        settings=hypothesis.settings(
            max_examples=STATEFUL_SCENARIOS,
            stateful_step_count=STATEFUL_STEPS,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(hypothesis.HealthCheck),
        )
    )


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


@pytest.mark.parametrize("method", ["put", "trace"])
@pytest.mark.parametrize("path", ["/api/v1/tenants/", "/api/v1/workloads/{id}/"])
def test_a_method_an_operation_does_not_have_is_a_json_405(api, method, path):
    path = path.format(id=api.workload.pk)
    response = session(api.world.admin).generic(method.upper(), path)
    assert response.status_code == 405
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "method_not_allowed"


def test_every_operation_documents_its_errors(api):
    schema = bearer(api.raw["read"]).get("/api/schema/?format=json").json()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            documented = set(operation["responses"])
            assert {"400", "401", "403", "404", "429"} <= documented, (method, path)
            if method != "get" or path.endswith("/logs/"):
                assert "409" in documented, (method, path)
    assert schema["components"]["schemas"]["Error"]["required"] == ["code", "detail", "errors"]
