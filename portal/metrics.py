"""The portal's own Prometheus metrics (docs/configuration.md, "Metrics").

- HTTP request durations, by view (the URL pattern's name, never the raw path), method, status:
  `RequestMetricsMiddleware`.
- Celery task runs (counted when a task starts), failures and durations, by task: Celery's
  signals (connected when portal.celery imports this module); each worker serves them on
  WORKER_METRICS_PORT.
- The portal's state, computed when Prometheus scrapes the web's /metrics (`PortalStateCollector`:
  three queries and one Redis round trip): reconcile failures and lag per tenant, Celery queue
  depths, pending approvals, grants about to end. Only the web's /metrics computes them, never a
  worker's port.

Several processes (gunicorn's workers, a prefork Celery worker's children) add up through
prometheus-client's multiprocess mode when PROMETHEUS_MULTIPROC_DIR is set. A prefork worker
needs it: its children run the tasks and its main process serves the port. The image sets it,
and `make run` sets one for its worker (scripts/serve.sh); without it (runserver, the tests'
in-process workers), the process's own registry is served.

Imported by portal.celery before Django is set up: models are imported where they are used."""

from __future__ import annotations

import glob
import hmac
import ipaddress
import logging
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

from celery.signals import (
    task_failure,
    task_postrun,
    task_prerun,
    worker_init,
    worker_shutdown,
)
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

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

# Known methods keep their name; anything else a client invents is one label value.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


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


# --- HTTP requests -----------------------------------------------------------------------------


def view_label(request: HttpRequest) -> str:
    """The name of the URL pattern that answered (`tenant-detail`, `api:workload-list`), its route
    when it has no name; `static` for WhiteNoise's files, `unmatched` for no pattern at all. Never
    the path: one series per page, not per tenant or id."""
    match = getattr(request, "resolver_match", None)
    if match is not None:
        return match.view_name or match.route or "unnamed"
    if request.path_info.startswith("/" + settings.STATIC_URL.lstrip("/")):
        return "static"
    return "unmatched"


class RequestMetricsMiddleware:
    """Observes each request's duration; placed near the top of MIDDLEWARE so that the time
    spent in the other middleware counts too."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        status = "500"
        try:
            response = self.get_response(request)
            status = str(response.status_code)
            return response
        finally:
            HTTP_REQUEST_DURATION.labels(
                view=view_label(request),
                method=request.method if request.method in _METHODS else "other",
                status=status,
            ).observe(time.perf_counter() - started)


# --- Celery tasks ------------------------------------------------------------------------------

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


# --- The portal's state, computed at scrape time -----------------------------------------------


def reconcile_lag_seconds(
    *,
    status: str | None,
    last_success_at: datetime | None,
    first_failure_at: datetime | None,
    tenant_created_at: datetime,
    now: datetime,
) -> float:
    """How long a tenant's namespace has not matched what PostgreSQL says it should have; 0 when
    it does. A change enqueues a reconcile at once, so the first failed run of the current
    streak (`TenantSyncState.failing_since`) started about when the change was made; a tenant
    never reconciled has waited since it was created; a run in progress after a success
    (syncing, no failure yet) is converging and counts 0."""
    if status == "in_sync":
        return 0.0
    if first_failure_at is not None:
        since = first_failure_at
    elif last_success_at is None:
        since = tenant_created_at
    else:
        return 0.0
    return max((now - since).total_seconds(), 0.0)


@dataclass
class TenantReconcile:
    slug: str
    consecutive_failures: int
    lag_seconds: float


@dataclass
class PortalState:
    tenants: list[TenantReconcile] = field(default_factory=list)
    pending_approvals: int = 0
    oldest_pending_age_seconds: float = 0.0
    grants_expiring_soon: int = 0


def read_portal_state(now: datetime) -> PortalState:
    """The database's part: one query per gauge family, whatever the number of tenants."""
    from django.db.models import Count, Min, Q

    from scheduler.cluster.models import TenantSyncState
    from tenants.models import CapacityRequest, QuotaGrant, Tenant

    in_sync = TenantSyncState.Status.IN_SYNC
    rows = (
        Tenant.objects.exclude(  # an archived tenant counts only while its clean-up is unfinished
            Q(status=Tenant.Status.ARCHIVED)
            & (Q(sync_state__isnull=True) | Q(sync_state__status=in_sync))
        )
        .values_list(
            "slug",
            "created_at",
            "sync_state__status",
            "sync_state__last_success_at",
            "sync_state__consecutive_failures",
            "sync_state__failing_since",
        )
        .order_by("slug")
    )
    state = PortalState()
    for slug, created_at, status, last_success_at, failures, first_failure_at in rows:
        state.tenants.append(
            TenantReconcile(
                slug=slug,
                consecutive_failures=failures or 0,  # None: never reconciled
                lag_seconds=reconcile_lag_seconds(
                    status=status,
                    last_success_at=last_success_at,
                    first_failure_at=first_failure_at,
                    tenant_created_at=created_at,
                    now=now,
                ),
            )
        )
    pending = CapacityRequest.objects.filter(state=CapacityRequest.State.SUBMITTED).aggregate(
        count=Count("pk"), oldest=Min("created_at")
    )
    state.pending_approvals = pending["count"]
    if pending["oldest"] is not None:
        state.oldest_pending_age_seconds = max((now - pending["oldest"]).total_seconds(), 0.0)
    window = timedelta(hours=settings.METRICS_GRANTS_EXPIRING_WITHIN_HOURS)
    state.grants_expiring_soon = (
        QuotaGrant.objects.holding(now).filter(ends_at__lte=now + window).count()
    )
    return state


def celery_queues() -> list[str]:
    """The queues the portal's tasks go to: the default one and every route's."""
    names = {settings.CELERY_TASK_DEFAULT_QUEUE}
    names.update(route["queue"] for route in settings.CELERY_TASK_ROUTES.values())
    return sorted(names)


# Kombu's Redis transport keeps a queue's messages in one list per priority step: the queue's
# own name (priority 0, what the portal sends) and `<queue>\x06\x16<step>` for the others.
_PRIORITY_SEP = "\x06\x16"
_PRIORITY_STEPS = (3, 6, 9)


def read_queue_depths() -> dict[str, int]:
    """Messages waiting in each Celery queue on the broker (Redis LLEN). Raises redis' errors."""
    import redis

    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    client = redis.Redis.from_url(
        settings.CELERY_BROKER_URL, socket_connect_timeout=1, socket_timeout=1
    )
    try:
        pipe = client.pipeline(transaction=False)
        queues = celery_queues()
        for queue in queues:
            pipe.llen(prefix + queue)
            for step in _PRIORITY_STEPS:
                pipe.llen(f"{prefix}{queue}{_PRIORITY_SEP}{step}")
        lengths = pipe.execute()
    finally:
        client.close()
    per_queue = len(_PRIORITY_STEPS) + 1
    return {
        queue: sum(lengths[i * per_queue : (i + 1) * per_queue]) for i, queue in enumerate(queues)
    }


def _gauge(name: str, documentation: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


class PortalStateCollector:
    """The portal's state as gauges, read when Prometheus scrapes. A source that is down
    (PostgreSQL, the broker's Redis) leaves its gauges out, says so in
    gpu_portal_metrics_source_up, and never fails the scrape."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from django.db import DatabaseError
        from django.utils import timezone
        from redis.exceptions import RedisError

        fams = self._families()
        up = _gauge(
            "gpu_portal_metrics_source_up",
            "Whether /metrics could read a source of the portal's state (1) or not (0)",
            ["source"],
        )
        try:
            state = read_portal_state(timezone.now())
        except DatabaseError as exc:
            log.warning("metrics: the database is unavailable: %s", exc)
            up.add_metric(["database"], 0)
        else:
            up.add_metric(["database"], 1)
            for tenant in state.tenants:
                fams["failures"].add_metric([tenant.slug], tenant.consecutive_failures)
                fams["lag"].add_metric([tenant.slug], tenant.lag_seconds)
            fams["pending"].add_metric([], state.pending_approvals)
            fams["oldest"].add_metric([], state.oldest_pending_age_seconds)
            fams["expiring"].add_metric([], state.grants_expiring_soon)
            yield from (fams[key] for key in ("failures", "lag", "pending", "oldest", "expiring"))
        try:
            depths = read_queue_depths()
        except RedisError as exc:
            log.warning("metrics: the broker is unavailable: %s", exc)
            up.add_metric(["broker"], 0)
        else:
            up.add_metric(["broker"], 1)
            for queue, depth in depths.items():
                fams["queue"].add_metric([queue], depth)
            yield fams["queue"]
        yield up

    def _families(self) -> dict[str, GaugeMetricFamily]:
        return {
            "failures": _gauge(
                "gpu_portal_reconcile_failures",
                "Consecutive failed reconciles of a tenant since its last success",
                ["tenant"],
            ),
            "lag": _gauge(
                "gpu_portal_reconcile_lag_seconds",
                "Seconds a tenant's namespace has not matched its desired state (0: in sync)",
                ["tenant"],
            ),
            "queue": _gauge(
                "gpu_portal_celery_queue_depth",
                "Messages waiting in a Celery queue on the broker",
                ["queue"],
            ),
            "pending": _gauge(
                "gpu_portal_pending_approvals", "Capacity requests waiting for a decision"
            ),
            "oldest": _gauge(
                "gpu_portal_pending_approval_oldest_age_seconds",
                "Age of the oldest capacity request waiting for a decision (0: none)",
            ),
            "expiring": _gauge(
                "gpu_portal_grants_expiring_soon",
                "Grants that end within METRICS_GRANTS_EXPIRING_WITHIN_HOURS",
            ),
        }


class _Exposition:
    """Several collectors as one, for generate_latest."""

    def __init__(self, *collectors: Collector):
        self.collectors = collectors

    def collect(self):
        for collector in self.collectors:
            yield from collector.collect()


# --- /metrics ----------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _networks(cidrs: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    try:
        return tuple(ipaddress.ip_network(cidr.strip(), strict=False) for cidr in cidrs)
    except ValueError as exc:
        raise ImproperlyConfigured(f"METRICS_ALLOWED_CIDRS: {exc}") from exc


def metrics_access_allowed(request: HttpRequest) -> bool:
    """/metrics answers the monitoring system only: a request bearing METRICS_TOKEN (when set),
    or one from an address in METRICS_ALLOWED_CIDRS that came through no proxy (a request
    through the ingress carries X-Forwarded-For, whoever sent it)."""
    token = settings.METRICS_TOKEN
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        # As bytes: compare_digest raises TypeError on a non-ASCII str (`Bearer café`, a 500).
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass")
        ):
            return True
    if "X-Forwarded-For" in request.headers:
        return False
    try:
        peer = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped:
        peer = peer.ipv4_mapped
    return any(peer in net for net in _networks(tuple(settings.METRICS_ALLOWED_CIDRS)))


@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus's text format: what the web processes counted, and the portal's state."""
    if not metrics_access_allowed(request):
        return HttpResponse(
            "metrics are for the monitoring system: a bearer token or an allowed address\n",
            status=403,
            content_type="text/plain",
        )
    body = generate_latest(_Exposition(process_registry(), PortalStateCollector()))
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
