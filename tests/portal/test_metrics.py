"""The portal's Prometheus metrics: the state gauges against the real database and Redis, the
request histogram's labels, /metrics and the probes whatever the Host, task metrics from a real
Celery worker, and a real Prometheus scraping the portal."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis
import requests
import time_machine
from celery.signals import task_postrun, task_prerun
from django.conf import settings as django_settings
from django.test import RequestFactory
from django.urls import reverse
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from demo.prometheus import PrometheusServer
from localcluster.pytest_plugin import wait_for
from portal.celery import app
from portal.metrics import celery_signals, collector, views
from scheduler.cluster.models import TenantSyncState
from tenants.models import CapacityRequest, QuotaGrant, Tenant
from tests.scheduler.cluster_helpers import celery_worker
from tests.tenants.factories import CapacityRequestFactory, QuotaGrantFactory, TenantFactory

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def samples(text_or_families) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of an exposition text or of metric families."""
    families = (
        text_string_to_metric_families(text_or_families)
        if isinstance(text_or_families, str)
        else text_or_families
    )
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value for fam in families for s in fam.samples
    }


# --- pure rules -----------------------------------------------------------------------------


def test_lag_is_zero_in_sync_and_counts_from_the_start_of_a_failing_streak():
    created = NOW - timedelta(days=30)
    lag = collector.reconcile_lag_seconds
    assert (
        lag(
            status="in_sync",
            last_success_at=NOW - timedelta(hours=5),
            first_failure_at=None,
            tenant_created_at=created,
            now=NOW,
        )
        == 0.0
    )
    assert (
        lag(
            status="failed",
            last_success_at=NOW - timedelta(hours=5),
            first_failure_at=NOW - timedelta(minutes=20),
            tenant_created_at=created,
            now=NOW,
        )
        == 1200.0
    )
    # Never reconciled: waiting since the tenant exists.
    assert (
        lag(
            status=None,
            last_success_at=None,
            first_failure_at=None,
            tenant_created_at=NOW - timedelta(minutes=3),
            now=NOW,
        )
        == 180.0
    )
    # A run in progress after a success, no failure yet: converging.
    assert (
        lag(
            status="syncing",
            last_success_at=NOW - timedelta(days=2),
            first_failure_at=None,
            tenant_created_at=created,
            now=NOW,
        )
        == 0.0
    )


@pytest.mark.parametrize(
    ("headers", "remote", "allowed"),
    [
        ({}, "127.0.0.1", True),
        ({}, "::1", True),
        ({}, "::ffff:127.0.0.1", True),
        ({}, "10.0.0.7", False),
        ({"HTTP_X_FORWARDED_FOR": "203.0.113.9"}, "127.0.0.1", False),  # through the ingress
        ({"HTTP_AUTHORIZATION": "Bearer s3cret-token"}, "203.0.113.9", True),
        ({"HTTP_AUTHORIZATION": "Bearer wrong"}, "203.0.113.9", False),
        ({"HTTP_AUTHORIZATION": "Basic s3cret-token"}, "203.0.113.9", False),
        ({"HTTP_AUTHORIZATION": "Bearer café"}, "203.0.113.9", False),  # not ASCII
        (
            {"HTTP_AUTHORIZATION": "Bearer s3cret-token", "HTTP_X_FORWARDED_FOR": "1.2.3.4"},
            "10.0.0.7",
            True,
        ),
    ],
)
def test_metrics_answer_the_token_or_an_allowed_address_without_a_proxy(
    settings, headers, remote, allowed
):
    settings.METRICS_TOKEN = "s3cret-token"
    settings.METRICS_ALLOWED_CIDRS = ["127.0.0.0/8", "::1/128"]
    request = RequestFactory().get("/metrics", REMOTE_ADDR=remote, **headers)
    assert views.metrics_access_allowed(request) is allowed


def test_without_a_token_a_bearer_header_opens_nothing(settings):
    settings.METRICS_TOKEN = ""
    request = RequestFactory().get("/metrics", REMOTE_ADDR="10.0.0.7", HTTP_AUTHORIZATION="Bearer ")
    assert views.metrics_access_allowed(request) is False


# --- the state gauges against the database and Redis -------------------------------------------


def _runs(tenant, *outcomes):
    """The tenant's sync state after reconciles (start, error or None), as `_record` keeps it."""
    state = TenantSyncState.objects.create(tenant=tenant)
    for started, error in outcomes:
        state.record_run(started=started, finished=started, error=error)
    state.save()


@pytest.mark.django_db
def test_the_collector_reads_reconcile_state_approvals_and_grants(settings):
    settings.METRICS_GRANTS_EXPIRING_WITHIN_HOURS = 7 * 24
    ago = lambda **kw: NOW - timedelta(**kw)  # noqa: E731
    with time_machine.travel(NOW, tick=False):
        created = NOW - timedelta(days=30)
        steady = TenantFactory(slug="m-steady", created_at=created)
        _runs(steady, (ago(hours=2), "boom"), (ago(hours=1), None))  # failed, then healed

        failing = TenantFactory(slug="m-failing", created_at=created)
        streak = [(ago(minutes=m), "API server unreachable") for m in (90, 60, 30)]
        # an older streak, healed since, then three failures in a row
        _runs(failing, (ago(hours=3), "boom"), (ago(hours=2), None), *streak)

        TenantFactory(slug="m-new", created_at=NOW - timedelta(minutes=10))  # never reconciled
        gone = TenantFactory(slug="m-gone", created_at=created, status=Tenant.Status.ARCHIVED)
        TenantSyncState.objects.create(tenant=gone, status="in_sync", last_success_at=created)

        CapacityRequestFactory(tenant=steady, created_at=NOW - timedelta(hours=3))
        CapacityRequestFactory(tenant=failing, created_at=NOW - timedelta(hours=1))
        CapacityRequestFactory(
            tenant=steady,
            created_at=NOW - timedelta(days=3),
            state=CapacityRequest.State.APPROVED,
        )
        QuotaGrantFactory(tenant=steady, ends_at=NOW + timedelta(days=2))
        QuotaGrantFactory(tenant=steady, ends_at=NOW + timedelta(days=10))
        QuotaGrantFactory(tenant=steady, ends_at=None)
        QuotaGrantFactory(
            tenant=steady, ends_at=NOW + timedelta(days=1), state=QuotaGrant.State.REVOKED
        )

        got = samples(collector.PortalStateCollector().collect())

    def gauge(name, **labels):
        return got[(name, tuple(sorted(labels.items())))]

    assert gauge("gpu_portal_reconcile_failures", tenant="m-steady") == 0
    assert gauge("gpu_portal_reconcile_lag_seconds", tenant="m-steady") == 0
    assert gauge("gpu_portal_reconcile_failures", tenant="m-failing") == 3
    assert gauge("gpu_portal_reconcile_lag_seconds", tenant="m-failing") == 90 * 60
    assert gauge("gpu_portal_reconcile_failures", tenant="m-new") == 0
    assert gauge("gpu_portal_reconcile_lag_seconds", tenant="m-new") == 10 * 60
    assert not [key for key in got if ("tenant", "m-gone") in key[1]]
    assert gauge("gpu_portal_pending_approvals") == 2
    assert gauge("gpu_portal_pending_approval_oldest_age_seconds") == 3 * 3600
    assert gauge("gpu_portal_grants_expiring_soon") == 1
    assert gauge("gpu_portal_metrics_source_up", source="database") == 1


@pytest.mark.django_db
def test_queue_depths_count_every_priority_list_of_each_queue(settings):
    prefix = f"metrics-test-{uuid.uuid4().hex[:8]}:"  # this test's keys only
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {
        **django_settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        "global_keyprefix": prefix,
    }
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        broker.rpush(f"{prefix}reconcile", "a", "b", "c")
        broker.rpush(f"{prefix}reconcile\x06\x166", "d")
        broker.rpush(f"{prefix}notify", "e")
        got = samples(collector.PortalStateCollector().collect())
    finally:
        broker.delete(f"{prefix}reconcile", f"{prefix}reconcile\x06\x166", f"{prefix}notify")
        broker.close()
    depth = {
        dict(labels)["queue"]: value
        for (name, labels), value in got.items()
        if name == "gpu_portal_celery_queue_depth"
    }
    assert depth == {"default": 0, "follow": 0, "metering": 0, "notify": 1, "reconcile": 4}
    assert got[("gpu_portal_metrics_source_up", (("source", "broker"),))] == 1


@pytest.mark.django_db
def test_a_broker_that_is_down_leaves_its_gauges_out_and_the_scrape_answers(client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    got = samples(response.content.decode())
    assert got[("gpu_portal_metrics_source_up", (("source", "broker"),))] == 0
    assert got[("gpu_portal_metrics_source_up", (("source", "database"),))] == 1
    assert not [key for key in got if key[0] == "gpu_portal_celery_queue_depth"]
    assert ("gpu_portal_pending_approvals", ()) in got


# --- the request histogram, /metrics and the probes ----------------------------------------------


def _count(view, method="GET", status="200") -> float:
    value = REGISTRY.get_sample_value(
        "gpu_portal_http_request_duration_seconds_count",
        {"view": view, "method": method, "status": status},
    )
    return value or 0.0


@pytest.mark.django_db
def test_requests_are_labelled_by_view_name_never_by_path(client):
    before_login, before_unmatched = _count("login"), _count("unmatched", status="404")
    assert client.get(reverse("login")).status_code == 200
    assert client.get("/no-such-page/qzx-unseen/").status_code == 404
    assert _count("login") == before_login + 1
    assert _count("unmatched", status="404") == before_unmatched + 1
    exposition = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert 'view="login"' in exposition
    # a word, not a number: a digit string can turn up inside a latency sum
    assert "qzx-unseen" not in exposition and "no-such-page" not in exposition


@pytest.mark.django_db
def test_probes_and_metrics_answer_whatever_the_host_and_nothing_else_does(client, settings):
    settings.ALLOWED_HOSTS = ["portal.example.com"]
    pod_ip = {"HTTP_HOST": "10.1.2.3"}
    probes = _count("healthz")
    response = client.get("/healthz", **pod_ip)
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert len(response["X-Request-ID"]) == 32  # still every response's
    assert _count("healthz") == probes + 1
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1", **pod_ip).status_code == 200
    assert client.get(reverse("login"), **pod_ip).status_code == 400
    assert client.get("/api/v1/tenants/", **pod_ip).status_code == 400
    assert client.get(reverse("login"), HTTP_HOST="portal.example.com").status_code == 200


@pytest.mark.django_db
def test_metrics_refuse_the_world_whatever_the_host(client, settings):
    settings.METRICS_TOKEN = "s3cret-token"
    outside = {"REMOTE_ADDR": "203.0.113.9", "HTTP_HOST": "10.1.2.3"}
    assert client.get("/metrics", **outside).status_code == 403
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="1.2.3.4").status_code == 403
    allowed = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token", **outside)
    assert allowed.status_code == 200
    # A token that is not ASCII is a wrong token, never an error.
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer café", **outside).status_code == 403
    assert allowed["Content-Type"].startswith("text/plain")
    assert client.post("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 405


# --- Celery: task metrics from a real worker, on its own port ---------------------------------


@app.task(name="tests.portal.test_metrics.fails_on_purpose")
def fails_on_purpose():
    raise RuntimeError("this task fails on purpose")


def _task_sample(sample, task) -> float:
    return REGISTRY.get_sample_value(sample, {"task": task.name}) or 0.0


def test_a_run_counts_when_the_task_starts_its_duration_when_it_ends():
    """A task killed by the hard time limit, or in a pool child that died, never sends
    task_postrun (but task_failure): its run counts all the same."""
    task, task_id = fails_on_purpose, uuid.uuid4().hex
    runs = _task_sample("gpu_portal_task_runs_total", task)
    durations = _task_sample("gpu_portal_task_duration_seconds_count", task)
    task_prerun.send(sender=task, task_id=task_id, task=task, args=(), kwargs={})
    assert _task_sample("gpu_portal_task_runs_total", task) == runs + 1
    assert _task_sample("gpu_portal_task_duration_seconds_count", task) == durations
    task_postrun.send(sender=task, task_id=task_id, task=task, args=(), kwargs={}, state="SUCCESS")
    assert _task_sample("gpu_portal_task_runs_total", task) == runs + 1
    assert _task_sample("gpu_portal_task_duration_seconds_count", task) == durations + 1


@pytest.mark.celery
def test_a_failing_task_counts_a_run_and_a_failure_on_the_workers_port(settings):
    name = fails_on_purpose.name
    # Bound before the worker starts, on a port the OS chose (no other process can take it
    # in between): the worker's worker_init finds it serving and keeps it.
    server = celery_signals.start_worker_metrics_server(0)
    port = settings.WORKER_METRICS_PORT = server.server_port

    def value(sample):
        return _task_sample(sample, fails_on_purpose)

    runs, failures = value("gpu_portal_task_runs_total"), value("gpu_portal_task_failures_total")
    durations = value("gpu_portal_task_duration_seconds_count")
    try:
        with celery_worker(["default"]):
            fails_on_purpose.delay()
            wait_for(
                "the failure to be counted",
                lambda: value("gpu_portal_task_failures_total") > failures,
            )
            # The last of the three: observed at task_postrun, after task_failure.
            wait_for(
                "the duration to be observed",
                lambda: value("gpu_portal_task_duration_seconds_count") > durations,
            )
            served = samples(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
    finally:
        # A real worker stops it on worker_shutdown; the test harness's worker sends none.
        celery_signals.stop_worker_metrics_server()
    labels = (("task", name),)
    assert served[("gpu_portal_task_failures_total", labels)] == failures + 1
    assert served[("gpu_portal_task_runs_total", labels)] == runs + 1
    assert served[("gpu_portal_task_duration_seconds_count", labels)] == durations + 1
    # The state gauges are the web's: a worker's port never queries the database for them.
    assert not [key for key in served if key[0] == "gpu_portal_pending_approvals"]


# --- a real Prometheus scraping the portal --------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_prometheus_scrapes_the_pending_approvals(live_server):
    if PrometheusServer.binary() is None:
        pytest.fail("Debian's prometheus package is missing: run scripts/bootstrap.sh")
    CapacityRequestFactory.create_batch(3)
    CapacityRequestFactory(state=CapacityRequest.State.APPROVED)
    prometheus = PrometheusServer([live_server.url.removeprefix("http://")])
    prometheus.start()

    def pending_approvals():
        answer = requests.get(
            f"{prometheus.url}/api/v1/query",
            params={"query": "gpu_portal_pending_approvals"},
            timeout=5,
        ).json()
        result = answer["data"]["result"]
        return result and float(result[0]["value"][1])

    try:
        assert wait_for("Prometheus to scrape the portal", pending_approvals, timeout=30) == 3
    finally:
        prometheus.stop()
