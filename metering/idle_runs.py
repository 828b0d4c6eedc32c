"""Idle GPUs given back: the periodic pass (beat task `give-back-idle-gpus`).

Every IDLE_CHECK_EVERY_S it reads each running workload's GPU use from DCGM through Prometheus
(`metering.prometheus.pod_utilisation`: `DCGM_FI_DEV_GPU_UTIL` on whole GPUs,
`DCGM_FI_PROF_GR_ENGINE_ACTIVE` on MIG instances, by the pods' namespace and name labels, a mean
over IDLE_USE_WINDOW), maps the pods to their workloads by the portal's pod label, lets the pure
decision (`scheduler.workloads.lifecycle.idle.decide`) say what to do under the strictest of the
policies of the workload's pools and its team (`Pool.idle_policy`, `Tenant.idle_policy`), and acts
(`scheduler.workloads.lifecycle.suspending`).

Fail safe: without Prometheus (not configured, unreachable, an error) the pass does nothing at
all, and a workload with a GPU pod that has no series is neither warned nor suspended.
Level-triggered and idempotent: the clock is on the workload's row, a second pass at once finds
the same facts, and two passes never run together (an advisory lock).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from catalog.idle_policy import IdlePolicy, strictest
from catalog.models import Pool
from core.errors import ClusterError
from core.locks import advisory_lock
from metering import prometheus
from scheduler.cluster import node_offers
from scheduler.cluster.kube import KubeGateway
from scheduler.workloads.kinds import owners
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.lifecycle import suspending
from scheduler.workloads.lifecycle.idle import Action, IdleFacts, decide
from scheduler.workloads.models import Workload
from tenants.models import Tenant

log = logging.getLogger(__name__)

IDLE_LOCK = (0x6777, 3)  # one pass at a time (the sync's is 1, the reclaim's 2)
# A workload exempts itself with this label set to "true" (serving that idles at night, a
# notebook its team keeps warm on purpose); the exemption is shown and audited like the rest.
IDLE_EXEMPT_LABEL = "gpu-portal.io/idle-exempt"


@dataclass
class IdlePass:
    looked: int = 0
    warned: list[int] = field(default_factory=list)
    suspended: list[int] = field(default_factory=list)
    skipped: str = ""  # why nothing was decided ("Prometheus unreachable: ...")


def exemption(workload: Workload) -> str:
    """Why a workload is never suspended for idleness, or ''."""
    if workload.priority_class in settings.IDLE_EXEMPT_PRIORITY_CLASSES:
        return f"priority {workload.priority_class}"
    if str((workload.labels or {}).get(IDLE_EXEMPT_LABEL, "")).lower() == "true":
        return f"label {IDLE_EXEMPT_LABEL}"
    return ""


def workload_use(pods: list[dict], use: dict[tuple[str, str], prometheus.PodUse]) -> Decimal | None:
    """The busiest of a workload's running GPU pods (mean GPU use over the window, 0-1); None
    when it has none running or one of them has no series (no data is never idle)."""
    values = []
    for pod in pods:
        info = node_offers.parse_gpu_pod(pod)
        if info is None or info.phase != "Running":
            continue
        seen = use.get((info.namespace, info.name))
        if seen is None:
            return None
        values.append(seen.util)
    return max(values) if values else None


def give_back_idle_gpus(kube: KubeGateway, *, now: datetime | None = None) -> IdlePass:
    with advisory_lock(*IDLE_LOCK) as acquired:
        if not acquired:
            return IdlePass(skipped="another pass holds the lock")
        return _pass(kube, now or timezone.now())


@dataclass(frozen=True)
class PoliciesInForce:
    """The idle policies set: per pool (by resource class slug) and per team (by tenant id)."""

    pools: dict[str, IdlePolicy]
    teams: dict[int, IdlePolicy]

    def __bool__(self) -> bool:
        return bool(self.pools or self.teams)

    def for_workload(self, w: Workload) -> IdlePolicy | None:
        """The strictest of its team's and its pools' policies (the one that suspends soonest)."""
        return strictest(
            [self.teams.get(w.tenant_id), *(self.pools.get(slug) for slug in w.resources or {})]
        )


def policies_in_force() -> PoliciesInForce:
    return PoliciesInForce(
        pools={
            pool.resource_class.slug: policy
            for pool in Pool.objects.filter(idle_threshold_pct__isnull=False).select_related(
                "resource_class"
            )
            if (policy := pool.idle_policy) is not None
        },
        teams={
            tenant.pk: policy
            for tenant in Tenant.objects.filter(idle_threshold_pct__isnull=False)
            if (policy := tenant.idle_policy) is not None
        },
    )


def _pass(kube: KubeGateway, now: datetime) -> IdlePass:
    policies = policies_in_force()
    result = IdlePass()
    if not policies:
        result.skipped = "no pool or team has an idle policy"
        return result
    url = settings.PROMETHEUS_URL
    if not url:
        result.skipped = "PROMETHEUS_URL is not set: nothing is suspended without GPU use"
        return result
    try:
        use = prometheus.pod_utilisation(url, window=settings.IDLE_USE_WINDOW)
    except prometheus.PrometheusUnavailable as exc:
        result.skipped = f"Prometheus unreachable, nothing decided: {exc}"
        log.warning("idle pass: %s", result.skipped)
        return result
    running = list(Workload.objects.filter(state=Workload.State.RUNNING).order_by("pk"))
    pods: dict[str, list[dict]] = {}
    in_namespace: dict[str, list[dict]] = {}  # work made outside the portal has no label of ours
    for ns in sorted({w.namespace for w in running}):
        in_namespace[ns] = kube.list("Pod", ns)
        for pod in in_namespace[ns]:
            label = (pod["metadata"].get("labels") or {}).get(WORKLOAD_LABEL)
            if label is not None:
                pods.setdefault(label, []).append(pod)
    max_gap_s = 3 * settings.IDLE_CHECK_EVERY_S
    for w in running:
        policy = policies.for_workload(w)
        starts = [t for t in (w.started_at, w.resumed_at) if t is not None]
        facts = IdleFacts(
            started_at=max(starts) if starts else None,
            use=workload_use(
                owners.own_pods(w.owner_kind, w.k8s_name, w.k8s_uid, in_namespace[w.namespace])
                if w.owner_kind
                else pods.get(str(w.pk), []),
                use,
            ),
            idle_since=w.idle_since,
            idle_seen_at=w.idle_seen_at,
            warned_at=w.idle_warned_at,
            exempt=exemption(w),
        )
        step = decide(policy, facts, now, max_gap_s=max_gap_s)
        result.looked += 1
        if step.action in (Action.TRACK, Action.CLEAR):
            suspending.record(w.pk, step, now)
        elif step.action == Action.WARN and suspending.warn_idle(w.pk, step, now):
            result.warned.append(w.pk)
        elif step.action == Action.SUSPEND:
            try:
                if suspending.suspend_idle(kube, w.pk, step, now):
                    result.suspended.append(w.pk)
            except ClusterError as exc:  # rolled back: the next pass decides again
                log.warning("could not suspend idle workload %s: %s", w.pk, exc)
    return result
