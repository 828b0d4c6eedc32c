"""An outage of the database, cache or broker answers 503 with Retry-After, never a 500; a bug
still answers 500. (The fault run proves it end to end with PostgreSQL and Redis stopped.)"""

import json

import kombu.exceptions
import pytest
import redis.exceptions
from django.db import OperationalError
from django.test import RequestFactory

from portal.views import server_error


@pytest.mark.parametrize(
    "exc, what",
    [
        (OperationalError("connection refused"), "the database"),
        (redis.exceptions.ConnectionError("refused"), "the cache"),
        (kombu.exceptions.OperationalError("broker down"), "the task queue"),
    ],
)
def test_an_outage_is_a_503_with_retry_after(exc, what):
    for path in ("/api/v1/workloads/", "/teams/"):
        request = RequestFactory().get(path)
        try:
            raise exc
        except Exception:
            response = server_error(request)
        assert response.status_code == 503 and response["Retry-After"] == "5"
        assert what in response.content.decode().lower()
    assert response["Content-Type"].startswith("text/html")


def test_a_bug_is_still_a_500_in_the_api_error_shape():
    request = RequestFactory().get("/api/v1/workloads/")
    try:
        raise KeyError("bug")
    except KeyError:
        response = server_error(request)
    assert response.status_code == 500 and "Retry-After" not in response
    import json

    assert json.loads(response.content)["code"] == "server_error"


@pytest.fixture
def refused_database(transactional_db):
    """Signs a client in while PostgreSQL answers, then points the connection at a closed port
    for what follows: every query of the next request is refused, as in an outage."""
    from django.db import connection

    def refuse():
        connection.close()
        connection.settings_dict["HOST"], connection.settings_dict["PORT"] = "127.0.0.1", 1

    saved = connection.settings_dict["HOST"], connection.settings_dict["PORT"]
    yield refuse
    connection.close()
    connection.settings_dict["HOST"], connection.settings_dict["PORT"] = saved


@pytest.mark.parametrize("path", ["/", "/teams/team-a/", "/api/v1/workloads/", "/no-such-page/"])
def test_a_refused_database_is_a_503_on_every_path_middleware_included(refused_database, path):
    """The session is read by AuthenticationMiddleware before any view runs: a database that
    refuses connections there is the same plain 503 as in a view, never a 500 or a debug page."""
    from django.test import Client

    from tests.tenants.factories import UserFactory

    client = Client(raise_request_exception=False)
    client.force_login(UserFactory(username="someone"))
    refused_database()
    response = client.get(path)
    assert response.status_code == 503, response.content[:300]
    assert response["Retry-After"] == "5"
    body = response.content.decode()
    assert "the database is unavailable" in body.lower()
    if path.startswith("/api/"):
        assert json.loads(body)["code"] == "unavailable"
    else:
        assert "Traceback" not in body and "<h1>" in body
