"""A batch of workloads synced side by side (lifecycle/side_by_side.py) against PostgreSQL, the
cluster's answers made up: the same places in the queue as one after another, each thread on a
connection of its own that it closes; a caller inside a transaction, whose rows other
connections cannot see yet, syncs on its own thread."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from scheduler.workloads.lifecycle import side_by_side
from scheduler.workloads.models import Workload
from tests.scheduler.factories import WorkloadFactory
from tests.scheduler.test_scale_paths import NS, Cluster


@pytest.fixture
def threads_used(monkeypatch):
    """The thread each workload's sync ran on."""
    used = []
    real = side_by_side.sync_workload

    def recorded(*args, **kwargs):
        used.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(side_by_side, "sync_workload", recorded)
    return used


def queue_of(n):
    made = timezone.now() - timedelta(hours=1)
    on_cluster = {"state": "queued", "namespace": NS, "cluster_created_at": made}
    return [WorkloadFactory(k8s_uid=f"u{i}", k8s_name=f"deep-{i}", **on_cluster) for i in range(n)]


def connections_open():
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]


def places():
    return dict(Workload.objects.filter(namespace=NS).values_list("k8s_uid", "queue_position"))


@pytest.mark.django_db(transaction=True)  # committed: the threads' connections see the rows
def test_a_batch_is_synced_on_several_threads_each_closing_its_connection(settings, threads_used):
    settings.SYNC_WORKLOADS_THREADS = 4
    queue = queue_of(24)  # 8 a thread: 3 threads
    before = connections_open()
    _, failed = side_by_side.sync_each(Cluster(queue), [(w.pk, NS) for w in queue])
    assert failed == []
    assert len(set(threads_used)) == 3 and threading.get_ident() not in threads_used
    assert places() == {f"u{i}": i + 1 for i in range(24)}  # as one after another records them
    deadline = time.monotonic() + 10  # a backend leaves pg_stat_activity as it exits
    while connections_open() > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert connections_open() == before


def test_inside_a_transaction_a_batch_is_synced_on_the_callers_thread(db, settings, threads_used):
    settings.SYNC_WORKLOADS_THREADS = 4
    queue = queue_of(24)  # not committed: another connection would not see them
    _, failed = side_by_side.sync_each(Cluster(queue), [(w.pk, NS) for w in queue])
    assert failed == []
    assert set(threads_used) == {threading.get_ident()}
    assert places() == {f"u{i}": i + 1 for i in range(24)}


@pytest.mark.django_db(transaction=True)  # committed: only its size keeps it on one thread
def test_a_small_batch_is_synced_on_the_callers_thread(settings, threads_used):
    settings.SYNC_WORKLOADS_THREADS = 4
    queue = queue_of(15)  # under 8 a thread for two: their connections would cost more
    side_by_side.sync_each(Cluster(queue), [(w.pk, NS) for w in queue])
    assert set(threads_used) == {threading.get_ident()}
