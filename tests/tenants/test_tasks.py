"""Beat's tasks through Redis and a real Celery worker."""

from datetime import timedelta

import pytest
from celery.contrib.testing.worker import start_worker
from celery.signals import task_postrun
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
    handled = []

    def count_runs(sender=None, **kwargs):  # the worker's threads run in this process
        if sender is not None and sender.name == tasks.expire_grants.name:
            handled.append(kwargs.get("task_id"))

    task_postrun.connect(count_runs, weak=False)
    try:
        tasks.expire_grants.delay()
        tasks.expire_grants.delay()  # a duplicate message changes nothing more
        # Both messages handled, not a guess at how long the second takes.
        wait_for("both messages to be handled", lambda: len(handled) >= 2)
    finally:
        task_postrun.disconnect(count_runs)
    assert QuotaGrant.objects.get(pk=grant.pk).state == "expired"
    assert AuditEvent.objects.filter(verb="quota_grant.expired").count() == 1


def test_tasks_are_declared_with_the_house_options():
    for task in (tasks.expire_grants, tasks.warn_expiring_grants):
        assert task.acks_late and task.reject_on_worker_lost
        assert task.retry_jitter and task.max_retries
