"""Beat's tasks through Redis and a real Celery worker."""

import time
from datetime import timedelta

import pytest
from celery.contrib.testing.worker import start_worker
from django.utils import timezone

from localcluster.pytest_plugin import wait_for
from portal.celery import app
from tenants import tasks
from tenants.models import AuditEvent, QuotaGrant
from tests.tenants.factories import QuotaGrantFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery]


@pytest.fixture
def celery_worker():
    app.control.purge()  # messages a portal left in the tests' broker database are not ours
    with start_worker(
        app,
        pool="threads",
        concurrency=1,
        perform_ping_check=False,
        shutdown_timeout=10,
        queues=["default", "notify"],
    ) as worker:
        yield worker


def test_expire_grants_runs_on_a_worker_and_is_safe_twice(celery_worker):
    grant = QuotaGrantFactory(
        starts_at=timezone.now() - timedelta(days=2), ends_at=timezone.now() - timedelta(minutes=1)
    )
    tasks.expire_grants.delay()
    tasks.expire_grants.delay()  # a duplicate message changes nothing more
    wait_for("the grant to expire", lambda: QuotaGrant.objects.get(pk=grant.pk).state == "expired")
    time.sleep(0.5)
    assert AuditEvent.objects.filter(verb="quota_grant.expired").count() == 1


def test_tasks_are_declared_with_the_house_options():
    for task in (tasks.expire_grants, tasks.warn_expiring_grants):
        assert task.acks_late and task.reject_on_worker_lost
        assert task.retry_jitter and task.max_retries
