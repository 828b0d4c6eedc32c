"""What the portal's metrics share: the counters and histograms the processes count,
prometheus-client's multiprocess directory and the registry a process serves. Imports no
Django models: portal.celery (through celery_signals) and gunicorn's master
(deploy/gunicorn.conf.py) load it before Django is set up."""

from __future__ import annotations

import glob
import os

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    multiprocess,
)
from prometheus_client.registry import Collector

# No `*_created` series: a second series per counter and histogram that no alert reads (and
# that multiprocess mode leaves out anyway: both modes answer the same names).
disable_created_metrics()

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
if os.environ.get(MULTIPROC_DIR_ENV):
    # prometheus-client writes its files there from the first sample on: the directory must be.
    os.makedirs(os.environ[MULTIPROC_DIR_ENV], exist_ok=True)

HTTP_REQUEST_DURATION = Histogram(
    "gpu_portal_http_request_duration_seconds",
    "Time to answer an HTTP request, by view (URL pattern name), method and status",
    ["view", "method", "status"],
)
# Up to the hard time limit (CELERY_TASK_TIME_LIMIT, 300 s by default).
TASK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TASK_RUNS = Counter("gpu_portal_task_runs", "Celery task executions, by task", ["task"])
TASK_FAILURES = Counter(
    "gpu_portal_task_failures", "Celery task executions that raised, by task", ["task"]
)
TASK_DURATION = Histogram(
    "gpu_portal_task_duration_seconds",
    "Time a Celery task ran, by task",
    ["task"],
    buckets=TASK_BUCKETS,
)


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_DIR_ENV) or None


def clear_multiprocess_dir() -> None:
    """Remove prometheus-client's files of an earlier run (a restarted container keeps its
    emptyDir): a dead process's counts would add to this run's. Only its *.db files go.
    Called by gunicorn's master (deploy/gunicorn.conf.py) and a Celery worker's main process."""
    directory = multiprocess_dir()
    if directory:
        os.makedirs(directory, exist_ok=True)
        for stale in glob.glob(os.path.join(directory, "*.db")):
            os.remove(stale)


def process_registry() -> Collector:
    """What this group of processes has counted: every process's files in multiprocess mode,
    the process's own registry otherwise."""
    if multiprocess_dir():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY
