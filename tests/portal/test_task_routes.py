"""Which queue each kind of task goes to (pure: Celery's router, no broker): the workload sync
on a queue of its own, so that one process runs it and each run takes on what the last one read
of the cluster (scheduler/workloads/lifecycle/reading.py `KEPT`)."""

import pytest

from portal.celery import app


@pytest.mark.parametrize(
    ("task", "queue"),
    [
        ("scheduler.tasks.sync_workloads", "follow"),
        ("scheduler.tasks.reconcile_all", "reconcile"),
        ("scheduler.tasks.create_workload", "reconcile"),
        ("metering.tasks.ingest_allocations", "metering"),
        ("tenants.tasks.deliver_notification", "notify"),
        ("tenants.tasks.expire_grants", "default"),
    ],
)
def test_each_task_goes_to_its_queue(task, queue):
    assert app.amqp.router.route({}, task)["queue"].name == queue
