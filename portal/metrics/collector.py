"""The portal's state as gauges, computed when Prometheus scrapes the web's /metrics (three
queries and two Redis round trips): reconcile failures and lag per tenant, Celery queue depths,
pending approvals, grants about to end, and what Kueue's running Configuration lacks."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count, Min, Q
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from redis.exceptions import RedisError

from scheduler.cluster import kueue_settings
from scheduler.cluster.models import TenantSyncState
from tenants.models import CapacityRequest, QuotaGrant, Tenant

log = logging.getLogger("portal.metrics")


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
        try:
            verdict = kueue_settings.remembered()  # the last check's, any process's
        except RedisError as exc:
            log.warning("metrics: the cache is unavailable: %s", exc)
            up.add_metric(["cache"], 0)
        else:
            up.add_metric(["cache"], 1)
            for missing in (verdict or {}).get("missing", []):
                fams["kueue"].add_metric([missing["setting"], missing["want"]], 1)
            yield fams["kueue"]
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
            "kueue": _gauge(
                "gpu_portal_kueue_setting_missing",
                "1 for each thing Kueue's running Configuration lacks for teams' work to go "
                "through the queue (or an enabled integration's absent CRD): the setting, and "
                "what to set it to",
                ["setting", "want"],
            ),
        }
