"""An outage of the database, cache or broker answers 503 with Retry-After, never a 500; a bug
still answers 500. (The fault run proves it end to end with PostgreSQL and Redis stopped.)"""

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
