"""Each minute: what the cluster's pods hold (allocation intervals) and, with Prometheus, what
they use (utilisation), written as one sample per tenant and resource class.

Intervals live in PostgreSQL, so a restarted worker carries on: a pod seen again continues its
interval (even one closed by mistake), a pod gone is closed at its containers' finish time when
the cluster still shows it, else at the last minute it was seen. Running twice in one minute
changes nothing more (samples are upserted, utilisation is added once per minute).
"""

from __future__ import annotations

import logging
import zlib
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from catalog import gpu_serving, product_labels
from catalog.models import ResourceClass
from metering import prometheus
from metering.models import AllocationInterval, IngestCursor, UsageSample
from scheduler.cluster import node_offers
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster, Node
from scheduler.cluster.render.labels import INSTANCE_LABEL, TENANT_LABEL
from scheduler.workloads.models import Workload
from tenants.models import QuotaGrant, Tenant

log = logging.getLogger(__name__)

WORKLOAD_LABEL = "gpu-portal.io/workload"
TERMINAL_PHASES = ("Succeeded", "Failed")
PREEMPTION_REASONS = frozenset({"PreemptionByScheduler", "PreemptionByKubeScheduler"})
_LOCK_KEY = zlib.crc32(b"metering.ingest")


@dataclass(frozen=True)
class NodeFacts:
    gpu_model: str
    sharing: str
    product: str


@dataclass(frozen=True)
class LivePod:
    uid: str
    namespace: str
    name: str
    node_name: str
    resource_name: str
    units: int
    started_at: str | None  # the pod's status.startTime, parsed only for new intervals
    workload_id: int | None


@dataclass
class IngestResult:
    at: datetime
    pods: int = 0
    opened: int = 0
    reopened: int = 0
    closed: int = 0
    samples: int = 0
    utilisation: int = 0
    unknown_nodes: list[str] = field(default_factory=list)
    utilisation_error: str = ""  # Prometheus did not answer: use is unknown for the minute
    backfilled: int = 0  # minutes missed since the last ingest (an outage), filled from intervals
    # Kept for a fleet's samples (metering/fleet_ingest.py), which add up every cluster's
    held: list = field(default_factory=list, repr=False)
    use: dict = field(default_factory=dict, repr=False)


def class_slug(node: NodeFacts | None, resource_name: str) -> str | None:
    """The resource class slug a pod's resource on this node is counted in (pure)."""
    if node is None or not node.gpu_model:
        return None
    units = node_offers.class_units(node.gpu_model, {resource_name: 1}, node.sharing, node.product)
    return next(iter(units), None)


def finish_of(pod: dict) -> tuple[datetime | None, str]:
    """When a pod stopped holding its devices, and why (pure): its containers' latest finish
    time, `preempted` when the scheduler disrupted it, else its phase."""
    status = pod.get("status", {})
    finished = []
    for cs in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        terminated = (cs.get("state") or {}).get("terminated") or {}
        if terminated.get("finishedAt"):
            finished.append(parse_datetime(terminated["finishedAt"]))
    reason = AllocationInterval.EndReason.DELETED
    phase = status.get("phase")
    if phase == "Succeeded":
        reason = AllocationInterval.EndReason.SUCCEEDED
    elif phase == "Failed":
        reason = AllocationInterval.EndReason.FAILED
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("reason") in PREEMPTION_REASONS:
            reason = AllocationInterval.EndReason.PREEMPTED
    if status.get("reason") == "Preempting":
        reason = AllocationInterval.EndReason.PREEMPTED
    return (max((f for f in finished if f), default=None), reason)


def read_pods(
    raw_pods: list[dict], claims: Mapping[tuple[str, str], tuple[str, ...]] | None = None
) -> tuple[list[LivePod], dict[str, tuple[datetime | None, str]]]:
    """Live GPU pods (one entry per GPU resource; a DRA pod's devices from `claims`, as
    node_offers.claim_devices reads them) and the finish of pods that stopped (pure)."""
    live: list[LivePod] = []
    stopped: dict[str, tuple[datetime | None, str]] = {}
    for pod in raw_pods:
        info = node_offers.parse_gpu_pod(pod, claims)
        if info is None:
            status = pod.get("status", {})
            if status.get("phase") in TERMINAL_PHASES or pod["metadata"].get("deletionTimestamp"):
                stopped[pod["metadata"].get("uid", "")] = finish_of(pod)
            continue
        label = (pod["metadata"].get("labels") or {}).get(WORKLOAD_LABEL, "")
        for name, units in info.resources.items():
            live.append(
                LivePod(
                    uid=info.uid,
                    namespace=info.namespace,
                    name=info.name,
                    node_name=info.node_name,
                    resource_name=name,
                    units=units,
                    started_at=info.started_at,
                    workload_id=int(label) if label.isdigit() else None,
                )
            )
    return live, stopped


def _node_facts(
    list_nodes: Callable[[], list[dict]], cluster: Cluster, names: set[str]
) -> dict[str, NodeFacts]:
    facts = {
        name: NodeFacts(model, sharing, product)
        for name, model, sharing, product in Node.objects.filter(
            cluster=cluster, name__in=names
        ).values_list("name", "gpu_model", "sharing_strategy", "gpu_product")
    }
    if names - facts.keys():  # not in the inventory yet: ask the cluster
        labels_by_model = product_labels.configured_product_labels()
        for node in list_nodes():
            info = node_offers.parse_node(node, labels_by_model)
            if info.name in names and info.name not in facts:
                facts[info.name] = NodeFacts(
                    info.gpu_model, info.sharing_strategy, info.gpu_product
                )
    return facts


def tenant_namespace_selector() -> str:
    return f"{TENANT_LABEL},{INSTANCE_LABEL}={settings.PORTAL_INSTANCE}"


def _tenants_by_namespace(namespaces: list[dict]) -> dict[str, int]:
    """Namespace -> tenant id, for this portal instance's tenant namespaces."""
    slugs = {ns["metadata"]["name"]: ns["metadata"]["labels"][TENANT_LABEL] for ns in namespaces}
    ids = dict(Tenant.objects.filter(slug__in=set(slugs.values())).values_list("slug", "pk"))
    return {ns: ids[slug] for ns, slug in slugs.items() if slug in ids}


def ingest_allocations(
    kube: KubeGateway,
    *,
    cluster_name: str = "local",
    now: datetime | None = None,
    prometheus_url: str | None = None,
    samples: bool = True,
) -> IngestResult:
    """One minute of metering (see the module's docstring): read the cluster, record it.
    `samples=False`: the minute's per-team samples are left to the caller, which adds up
    several clusters' (`write_samples_of`)."""
    return record_snapshot(
        pods=kube.list("Pod"),
        # a DRA pod's devices are in its claims (none read where no model is served so)
        claims=node_offers.claim_devices(kube.list("ResourceClaim"))
        if gpu_serving.dra_models()
        else {},
        namespaces=kube.list("Namespace", label_selector=tenant_namespace_selector()),
        list_nodes=lambda: kube.list("Node"),
        cluster_name=cluster_name,
        now=now,
        prometheus_url=prometheus_url,
        samples=samples,
    )


def record_snapshot(
    *,
    pods: list[dict],
    namespaces: list[dict],
    list_nodes: Callable[[], list[dict]],
    claims: Mapping[tuple[str, str], tuple[str, ...]] | None = None,
    cluster_name: str = "local",
    now: datetime | None = None,
    prometheus_url: str | None = None,
    samples: bool = True,
) -> IngestResult:
    """Record what one reading of the cluster saw: its pods, this instance's tenant namespaces,
    and (only when the inventory lacks a node) its nodes. Plain data in, so the interval
    arithmetic is tested on prepared readings and the reading itself on the real cluster."""
    now = now or timezone.now()
    minute = now.astimezone(UTC).replace(second=0, microsecond=0)
    live, stopped = read_pods(pods, claims)
    tenants = _tenants_by_namespace(namespaces)
    use: dict[tuple[str, str], prometheus.PodUse] = {}
    result = IngestResult(at=minute, pods=len({p.uid for p in live}))
    url = settings.PROMETHEUS_URL if prometheus_url is None else prometheus_url
    if url:
        try:
            use = prometheus.pod_utilisation(url)
        except prometheus.PrometheusUnavailable as exc:
            # Allocation needs only the API server: record it; utilisation stays unknown.
            result.utilisation_error = str(exc)
            log.warning("utilisation unknown this minute: %s", exc)
    cluster, _ = Cluster.objects.get_or_create(name=cluster_name)
    nodes = _node_facts(list_nodes, cluster, {p.node_name for p in live})
    result.unknown_nodes = sorted({p.node_name for p in live} - nodes.keys())
    classes = dict(ResourceClass.objects.values_list("slug", "pk"))
    with transaction.atomic():
        with connection.cursor() as cursor:  # one ingest at a time; a second waits, then no-ops
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        last = IngestCursor.objects.select_for_update().filter(cluster=cluster).first()
        previous = last.last_at if last else None
        names = _Lookups(nodes=nodes, tenants=tenants, classes=classes)
        held = _write_intervals(cluster, live, stopped, names, now, previous, result)
        IngestCursor.objects.update_or_create(cluster=cluster, defaults={"last_at": now})
        _write_utilisation(cluster, live, use, minute, result)
        if samples:
            _write_samples(held, minute, use, result)
        else:
            result.held, result.use = held, use
        if previous is not None:
            _backfill_samples(cluster, previous, minute, result)
    return result


def missed_minutes(previous: datetime, minute: datetime, limit: int) -> list[datetime]:
    """The whole minutes strictly between the last ingest's and this one's (pure), at most
    `limit` of them, the newest kept."""
    first = previous.astimezone(UTC).replace(second=0, microsecond=0)
    count = int((minute - first).total_seconds() // 60) - 1
    return [minute - timedelta(minutes=n) for n in range(min(count, limit), 0, -1)]


Key = tuple[int, int]  # (tenant id, resource class id)


def _grants_over(first: datetime, last: datetime) -> list[tuple]:
    """Active grants in force at some minute of [first, last]: (tenant id, class id, amount,
    starts_at, ends_at)."""
    return list(
        QuotaGrant.objects.holding(first)
        .filter(starts_at__lte=last)
        .values_list("tenant_id", "resource_class_id", "amount", "starts_at", "ends_at")
    )


def quota_at(grants: list[tuple], at: datetime) -> dict[Key, Decimal]:
    """Each tenant's quota per class at `at` (pure): the grants in force then, summed (what
    `QuotaGrant.objects.effective(at)` sums)."""
    quota: dict[Key, Decimal] = defaultdict(Decimal)
    for tenant_id, rc_id, amount, starts, ends in grants:
        if starts <= at and (ends is None or ends > at):
            quota[(tenant_id, rc_id)] += Decimal(amount)
    return quota


def _samples(
    at: datetime,
    allocated: dict[Key, Decimal],
    quota: dict[Key, Decimal],
    known: dict[Key, Decimal] | None = None,
    used: dict[Key, Decimal] | None = None,
) -> list[UsageSample]:
    """One row per tenant and class that holds or was granted something at `at`; no known and
    used (utilisation unknown) when not given."""
    known, used = known or {}, used or {}
    return [
        UsageSample(
            at=at,
            tenant_id=key[0],
            resource_class_id=key[1],
            allocated=allocated.get(key, Decimal(0)),
            known=known.get(key, Decimal(0)),
            used=used.get(key, Decimal(0)).quantize(Decimal("0.0001")),
            quota=quota.get(key, Decimal(0)),
        )
        for key in sorted(allocated.keys() | quota.keys())
    ]


def _backfill_samples(cluster, previous: datetime, minute: datetime, result) -> None:
    """Minutes no ingest ran in (the database, the API server or the worker was down) get their
    samples from the intervals, which know when each pod started and ended: allocation has no
    gap; utilisation stays unknown for them (`known` 0). A minute that has a sample already
    keeps it."""
    minutes = missed_minutes(previous, minute, settings.METERING_BACKFILL_MAX_MINUTES)
    if not minutes:
        return
    intervals = list(
        AllocationInterval.objects.filter(
            cluster=cluster,
            tenant__isnull=False,
            resource_class__isnull=False,
            started_at__lt=minutes[-1] + timedelta(minutes=1),
        )
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=minutes[0]))
        .values_list("tenant_id", "resource_class_id", "units", "started_at", "ended_at")
    )
    grants = _grants_over(minutes[0], minutes[-1])  # one query for the whole gap
    samples: list[UsageSample] = []
    for at in minutes:
        allocated: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
        for tenant_id, rc_id, units, started, ended in intervals:
            if started <= at and (ended is None or ended > at):
                allocated[(tenant_id, rc_id)] += units
        samples += _samples(at, allocated, quota_at(grants, at))  # utilisation unknown
    UsageSample.objects.bulk_create(samples, batch_size=2000, ignore_conflicts=True)
    result.backfilled = len(minutes)


@dataclass(frozen=True)
class _Lookups:
    """What the names a pod carries stand for: its node's facts, its namespace's tenant id, its
    resource's class id (read before the ingest's lock)."""

    nodes: dict
    tenants: dict
    classes: dict


def _write_intervals(cluster, live, stopped, names: _Lookups, now, previous, result) -> list[tuple]:
    """Open, carry on, close and reopen intervals; returns what is held now: (tenant id,
    class id, units, pod) for tenants' pods."""
    open_rows: dict[tuple[str, str], tuple[int, int | None, int | None, int]] = {
        (uid, name): (pk, tenant_id, rc_id, units)
        for pk, uid, name, tenant_id, rc_id, units in AllocationInterval.objects.filter(
            cluster=cluster, ended_at__isnull=True
        ).values_list("pk", "pod_uid", "resource_name", "tenant_id", "resource_class_id", "units")
    }
    live_keys = {(p.uid, p.resource_name): p for p in live}
    gone = {row[0]: key for key, row in open_rows.items() if key not in live_keys}
    closing = []
    for pk, started, last_seen in AllocationInterval.objects.filter(pk__in=gone).values_list(
        "pk", "started_at", "last_seen_at"
    ):
        finish, reason = stopped.get(gone[pk][0], (None, AllocationInterval.EndReason.DELETED))
        # Every open interval was seen by the previous ingest (or written later than it).
        seen = max(last_seen, previous) if previous is not None else last_seen
        end = finish if finish is not None and started <= finish <= now else seen
        closing.append(AllocationInterval(pk=pk, ended_at=max(end, started), end_reason=reason))
    AllocationInterval.objects.bulk_update(closing, ["ended_at", "end_reason"], batch_size=1000)
    for pk in gone:
        del open_rows[gone[pk]]
    result.closed = len(closing)
    new = {key: pod for key, pod in live_keys.items() if key not in open_rows}
    if new:
        closed_before = AllocationInterval.objects.filter(
            cluster=cluster, pod_uid__in={uid for uid, _ in new}, ended_at__isnull=False
        ).values_list("pk", "pod_uid", "resource_name", "tenant_id", "resource_class_id", "units")
        reopen = []
        for pk, uid, name, tenant_id, rc_id, units in closed_before:
            if new.pop((uid, name), None) is not None:
                reopen.append(pk)
                open_rows[(uid, name)] = (pk, tenant_id, rc_id, units)
        AllocationInterval.objects.filter(pk__in=reopen).update(
            ended_at=None, end_reason="", last_seen_at=now
        )
        result.reopened = len(reopen)
        wanted = {p.workload_id for p in new.values() if p.workload_id}
        workloads = dict(
            Workload.objects.filter(pk__in=wanted).values_list("pk", "namespace") if wanted else []
        )
        rows = []
        for pod in new.values():
            node = names.nodes.get(pod.node_name)
            slug = class_slug(node, pod.resource_name)
            started = min(parse_datetime(pod.started_at) if pod.started_at else now, now)
            rows.append(
                AllocationInterval(
                    cluster=cluster,
                    pod_uid=pod.uid,
                    namespace=pod.namespace,
                    pod_name=pod.name,
                    node_name=pod.node_name,
                    tenant_id=names.tenants.get(pod.namespace),
                    resource_class_id=names.classes.get(slug) if slug else None,
                    workload_id=(
                        pod.workload_id
                        if workloads.get(pod.workload_id or 0) == pod.namespace
                        else None
                    ),
                    resource_name=pod.resource_name,
                    gpu_model=node.gpu_model if node else "",
                    units=pod.units,
                    started_at=started,
                    last_seen_at=now,
                )
            )
        AllocationInterval.objects.bulk_create(rows, batch_size=2000, ignore_conflicts=True)
        result.opened = len(rows)
        for row in rows:
            open_rows[(row.pod_uid, row.resource_name)] = (
                0,
                row.tenant_id,
                row.resource_class_id,
                row.units,
            )
    return [
        (tenant_id, rc_id, units, live_keys[key])
        for key, (_, tenant_id, rc_id, units) in open_rows.items()
        if tenant_id is not None and rc_id is not None
    ]


def _write_utilisation(cluster, live, use, minute, result) -> None:
    if not use:
        return
    ids, utils, fbs = [], [], []
    keys = {(p.namespace, p.name) for p in live if (p.namespace, p.name) in use}
    rows = AllocationInterval.objects.filter(
        cluster=cluster, ended_at__isnull=True, namespace__in={ns for ns, _ in keys}
    ).values_list("pk", "namespace", "pod_name")
    for pk, ns, name in rows:
        pod_use = use.get((ns, name))
        if pod_use is not None:
            ids.append(pk)
            utils.append(pod_use.util)
            fbs.append(pod_use.fb_used_mib)
    if not ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE metering_allocationinterval AS a
               SET util_sum = a.util_sum + v.u, util_samples = a.util_samples + 1,
                   util_at = %s, fb_used_mib = v.fb
              FROM unnest(%s::bigint[], %s::numeric[], %s::integer[]) AS v(id, u, fb)
             WHERE a.id = v.id AND (a.util_at IS NULL OR a.util_at < %s)
            """,
            [minute, ids, utils, fbs, minute],
        )
    result.utilisation = len(ids)


def write_samples_of(results: list[IngestResult]) -> None:
    """One minute's samples from several clusters' readings of it, added up per team and
    class (a team placed on a group of workers may hold GPUs on several)."""
    held = [h for r in results for h in r.held]
    use = {k: v for r in results for k, v in r.use.items()}
    _write_samples(held, results[0].at, use, results[0])


def _write_samples(held, minute, use, result) -> None:
    """One row per tenant and class for this minute, from what is held now (upserted)."""
    allocated: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
    known: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
    used: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
    for tenant_id, rc_id, units, pod in held:
        key = (tenant_id, rc_id)
        allocated[key] += units
        pod_use = use.get((pod.namespace, pod.name))
        if pod_use is not None:
            known[key] += units
            used[key] += units * pod_use.util
    quota = quota_at(_grants_over(minute, minute), minute)
    samples = _samples(minute, allocated, quota, known, used)
    UsageSample.objects.bulk_create(
        samples,
        batch_size=2000,
        update_conflicts=True,
        unique_fields=["at", "tenant", "resource_class"],
        update_fields=["allocated", "known", "used", "quota"],
    )
    result.samples = len(samples)
