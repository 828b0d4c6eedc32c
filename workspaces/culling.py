"""Culling idle workspaces: the periodic pass (beat task `cull-workspaces`).

Every WORKSPACE_CULL_EVERY_S it asks each running workspace's server for its last activity and
DCGM for its GPU use (`activity.py`: interfaces, real readers by default), records what the
server said for the page, lets the pure decision (`idleness.decide`) speak, and acts through the
idle machinery of workloads (`scheduler.workloads.lifecycle.suspending`): a warning (audited, on the
run's page, mailed to its submitter), then a stop that suspends the run through Kueue (its
quota freed, its Job and spec kept, the home volume untouched), which the owner restarts in one
click (`services.restart_workspace` resumes it). Activity after a warning withdraws it
(audited). One pass at a time (an advisory lock); a second pass at once finds the same facts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from core.errors import ClusterError
from core.locks import advisory_lock
from scheduler.cluster.kube import KubeGateway
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.lifecycle import suspending
from scheduler.workloads.lifecycle.idle import Action, Step
from scheduler.workloads.models import Workload
from tenants.models import Tenant
from workspaces.activity import (
    ActivityReader,
    GpuUseReader,
    HttpActivityReader,
    PrometheusGpuUse,
)
from workspaces.idleness import Cull, CullFacts, CullPolicy, decide
from workspaces.models import Workspace, WorkspacePolicy

log = logging.getLogger(__name__)

CULL_LOCK = (0x6777, 0x5753)  # one pass at a time ("WS"; the other passes use 1-3)


@dataclass
class CullPass:
    looked: int = 0
    warned: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)


def cull_policy(tenant: Tenant) -> CullPolicy:
    own = WorkspacePolicy.objects.filter(tenant=tenant).values_list("idle_after_s", flat=True)
    idle_after = next((s for s in own if s), None) or settings.WORKSPACE_IDLE_AFTER_S
    return CullPolicy(
        idle_after_s=idle_after,
        notice_s=min(settings.WORKSPACE_IDLE_NOTICE_S, idle_after),
        threshold_pct=settings.WORKSPACE_IDLE_GPU_PCT,
    )


def facts_for(ws: Workspace, last_activity: datetime | None, gpu_use) -> CullFacts:
    run = ws.run
    assert run is not None
    starts = [t for t in (run.started_at, run.resumed_at) if t is not None]
    return CullFacts(
        started_at=max(starts) if starts else None,
        last_activity=last_activity,
        gpu_use=gpu_use,
        warned_at=run.idle_warned_at,
    )


def cull_workspaces(
    kube: KubeGateway,
    *,
    activity: ActivityReader | None = None,
    gpu: GpuUseReader | None = None,
    now: datetime | None = None,
) -> CullPass:
    with advisory_lock(*CULL_LOCK) as acquired:
        if not acquired:
            return CullPass()
        return _pass(
            kube, activity or HttpActivityReader(), gpu or PrometheusGpuUse(), now or timezone.now()
        )


def _pass(
    kube: KubeGateway, activity: ActivityReader, gpu: GpuUseReader, now: datetime
) -> CullPass:
    result = CullPass()
    running = Workspace.objects.filter(run__state=Workload.State.RUNNING).select_related(
        "run", "tenant", "owner"
    )
    for ws in running.order_by("pk"):
        run = ws.run
        assert run is not None
        last = activity.last_activity(ws)
        if last is not None:
            Workspace.objects.filter(pk=ws.pk).update(last_activity=last, activity_seen_at=now)
        pods = kube.list("Pod", run.namespace, label_selector=f"{WORKLOAD_LABEL}={run.pk}")
        step = decide(cull_policy(ws.tenant), facts_for(ws, last, gpu.gpu_use(ws, pods)), now)
        result.looked += 1
        if step.action == Cull.CLEAR:
            suspending.record(run.pk, Step(Action.CLEAR), now)
        elif step.action == Cull.WARN:
            if suspending.warn_idle(run.pk, Step(Action.WARN, step.quiet_since, step.why), now):
                result.warned.append(ws.pk)
        elif step.action == Cull.STOP:
            try:
                said = Step(Action.SUSPEND, step.quiet_since, f"workspace {ws.name} {step.why}")
                if suspending.suspend_idle(kube, run.pk, said, now):
                    result.stopped.append(ws.pk)
            except ClusterError as exc:  # rolled back: the next pass decides again
                log.warning("could not stop idle workspace %s: %s", ws.pk, exc)
    return result
