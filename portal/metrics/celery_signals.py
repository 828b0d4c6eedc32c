"""Celery task runs (counted when a task starts), failures and durations, by task, from
Celery's signals, and each worker's metrics port (WORKER_METRICS_PORT). portal.celery imports
this module before Django is set up: it imports no models."""

from __future__ import annotations

import logging
import time

from celery.signals import (
    task_failure,
    task_postrun,
    task_prerun,
    worker_init,
    worker_shutdown,
)
from django.conf import settings
from prometheus_client import start_http_server

from portal.metrics.registry import (
    TASK_DURATION,
    TASK_FAILURES,
    TASK_RUNS,
    clear_multiprocess_dir,
    process_registry,
)

log = logging.getLogger("portal.metrics")

_task_started: dict[str, float] = {}


def _task_name(task) -> str:
    return getattr(task, "name", None) or "unknown"


# A run counts when it starts: task_postrun never comes for a task killed by the hard time
# limit or in a pool child that died, while task_failure still does (failures <= runs).
@task_prerun.connect
def _count_task_run(task_id=None, task=None, **_kwargs) -> None:
    TASK_RUNS.labels(task=_task_name(task)).inc()
    if task_id:
        _task_started[task_id] = time.perf_counter()


@task_postrun.connect
def _observe_task_duration(task_id=None, task=None, **_kwargs) -> None:
    started = _task_started.pop(task_id, None) if task_id else None
    if started is not None:
        TASK_DURATION.labels(task=_task_name(task)).observe(time.perf_counter() - started)


@task_failure.connect
def _count_task_failure(sender=None, **_kwargs) -> None:
    TASK_FAILURES.labels(task=_task_name(sender)).inc()


_worker_server = None


def start_worker_metrics_server(port: int):
    """Serve the task metrics on `port` (all addresses; 0: a free one, the server's
    `server_port`), once per worker, and return the server; a port already taken is logged,
    not fatal: the worker's work matters more than its metrics."""
    global _worker_server
    if _worker_server is not None:
        return _worker_server
    try:
        _worker_server, _thread = start_http_server(port, registry=process_registry())
    except OSError as exc:
        log.warning("worker metrics: cannot listen on port %s: %s", port, exc)
        return None
    log.info("worker metrics on port %s", _worker_server.server_port)
    return _worker_server


def stop_worker_metrics_server() -> None:
    global _worker_server
    if _worker_server is not None:
        _worker_server.shutdown()
        _worker_server.server_close()
        _worker_server = None


@worker_init.connect
def _serve_worker_metrics(**_kwargs) -> None:
    # The main process, before a prefork pool forks its children: their samples go to files in
    # the multiprocess directory, which this process's server adds up.
    if settings.WORKER_METRICS_PORT:
        clear_multiprocess_dir()
        start_worker_metrics_server(settings.WORKER_METRICS_PORT)


@worker_shutdown.connect
def _stop_worker_metrics(**_kwargs) -> None:
    stop_worker_metrics_server()
