import json
import logging

import pytest
from django.urls import reverse

from core.logging import JsonFormatter, RequestIdFilter
from core.request_context import set_request_id

pytestmark = pytest.mark.django_db


def test_every_response_carries_a_request_id(client):
    response = client.get(reverse("healthz"))
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert len(response["X-Request-ID"]) == 32


def test_a_callers_request_id_is_kept_when_it_is_safe(client):
    response = client.get(reverse("healthz"), HTTP_X_REQUEST_ID="ci-job-42-abcdef")
    assert response["X-Request-ID"] == "ci-job-42-abcdef"
    bad = client.get(reverse("healthz"), HTTP_X_REQUEST_ID="<script>")
    assert bad["X-Request-ID"] != "<script>"


def test_log_lines_are_json_with_the_request_id():
    record = logging.makeLogRecord(
        {
            "msg": "approved %s",
            "args": ("#1",),
            "levelname": "INFO",
            "name": "tenants",
            "tenant": "team-a",
        }
    )
    set_request_id("abc12345")
    try:
        RequestIdFilter().filter(record)
    finally:
        set_request_id(None)
    line = json.loads(JsonFormatter().format(record))
    assert line["request_id"] == "abc12345"
    assert line["msg"] == "approved #1" and line["tenant"] == "team-a"


def test_home_needs_sign_in(client):
    response = client.get(reverse("home"))
    assert response.status_code == 302 and reverse("login") in response["Location"]


def test_home_shows_only_my_teams(client, world):
    client.force_login(world.member)
    body = client.get(reverse("home")).content.decode()
    assert "team-a" in body and "team-b" not in body


def test_sign_in_page_has_labelled_fields(client):
    body = client.get(reverse("login")).content.decode()
    assert '<label for="id_username">' in body and '<label for="id_password">' in body


@pytest.mark.cluster
def test_readyz_checks_the_database_redis_and_the_cluster(client, kube, settings):
    from scheduler.cluster import kube as kube_module

    ready = client.get(reverse("readyz"))
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "checks": {"database": "ok", "redis": "ok", "cluster": "ok"},
    }
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    settings.KUBECONFIG = "/nonexistent/kubeconfig"
    kube_module.reset_gateway()
    down = client.get(reverse("readyz"))
    assert down.status_code == 503 and down["Retry-After"] == "10"
    checks = down.json()["checks"]
    assert checks["database"] == "ok"
    assert checks["redis"].startswith("unavailable") and checks["cluster"].startswith("unavailable")
    # liveness asks nothing of them
    assert client.get(reverse("healthz")).status_code == 200


def test_prices_are_in_the_billing_currency_on_every_page(client, world, settings):
    settings.BILLING_CURRENCY = "EUR"
    client.force_login(world.owner)
    for url in (reverse("home"), reverse("tenants:request_create", args=["team-a"])):
        body = client.get(url).content.decode()
        assert "EUR / h" in body and "USD" not in body, url
