"""Work left running above a lowered quota, stopped by policy.

When a grant ends, is revoked or shrinks, the reconciler lowers the team's Kueue ClusterQueue
within one run, and new work waits. Kueue does not evict admitted work for that (seen on the
local cluster: `tests/scheduler/test_kueue_cluster.py`), so a team could keep what it no longer
holds for as long as its jobs run. The portal's policy: once a team has run above its grant plus
what its pool lets it borrow for `OVER_QUOTA_GRACE_S`, it stops the team's lowest-priority,
newest running work first until the rest fits; each stop is audited and mailed to the owners.
`OVER_QUOTA_GRACE_S` < 0 turns the policy off.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from catalog import slices
from catalog.models import ResourceClass
from core.tasks import portal_task
from scheduler.cluster.models import TenantSyncState
from scheduler.workloads import tasks
from scheduler.workloads.kinds.manifests import Observation
from scheduler.workloads.lifecycle.sync import change_state
from scheduler.workloads.models import Workload
from tenants.models import Tenant
from tenants.models.priority_classes import PRIORITY_CLASS_DEFS
from tenants.notifications import notify
from tenants.selectors import effective_quotas

log = logging.getLogger(__name__)

PRIORITY_VALUE = {pc.name: pc.value for pc in PRIORITY_CLASS_DEFS}


# What a workload holds, in the unit quotas are counted in: {class slug: units} per class, or
# {"<model> slices": slices} in slices (`in_slices`).
Held = Callable[[Workload], dict[str, int]]


def per_class(w: Workload) -> dict[str, int]:
    return w.units_held()


def in_slices(classes: dict[str, ResourceClass]) -> Held:
    """A workload's hold in its model's compute slices, given the classes by slug."""

    def held(w: Workload) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for slug, units in w.units_held().items():
            rc = classes.get(slug)
            if rc is not None:
                out[f"{rc.gpu_model} slices"] += units * slices.slices_per_unit(rc)
        return dict(out)

    return held


def overage(
    running: list[Workload], allowed: dict[str, int], held: Held = per_class
) -> dict[str, int]:
    """quota key (class slug, or "<model> slices") -> units running beyond what is allowed
    (pure)."""
    used: dict[str, int] = defaultdict(int)
    for w in running:
        for key, units in held(w).items():
            used[key] += units
    return {k: n - allowed.get(k, 0) for k, n in used.items() if n > allowed.get(k, 0)}


def to_stop(
    running: list[Workload], allowed: dict[str, int], held_by: Held = per_class
) -> list[Workload]:
    """Which running workloads to stop so that the rest fits: lowest priority first, newest
    first within a priority, and only those that hold an over-used class (pure)."""
    over = overage(running, allowed, held_by)
    chosen = []
    order = sorted(
        running, key=lambda w: (PRIORITY_VALUE.get(w.priority_class, 0), -w.created_at.timestamp())
    )
    for w in order:
        if not over:
            break
        held = held_by(w)
        if not any(slug in over for slug in held):
            continue
        chosen.append(w)
        for slug, units in held.items():
            if slug in over:
                over[slug] -= units
                if over[slug] <= 0:
                    del over[slug]
    return chosen


def _allowed(tenant_ids: list[int], classes: list[ResourceClass]) -> dict[int, dict[str, int]]:
    """tenant id -> quota key -> units it may run: its grant plus what its pools let it
    borrow, per class, or per model in slices (as the queue line renders them)."""
    quotas = effective_quotas(tenant_ids)
    with_pool = [rc for rc in classes if getattr(rc, "pool", None) is not None]
    by_model: dict[str, list[ResourceClass]] = defaultdict(list)
    for rc in classes:
        by_model[rc.gpu_model].append(rc)
    out: dict[int, dict[str, int]] = {}
    for tenant_id in tenant_ids:
        granted = quotas.get(tenant_id, {})
        if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES:
            out[tenant_id] = {
                f"{model} slices": sum(slices.model_allowance(group, granted))
                for model, group in by_model.items()
            }
            continue
        # a class without a pool has no borrowing: its grant alone, as the queue renders it
        out[tenant_id] = {
            rc.slug: granted.get(rc.pk, 0) + rc.pool.borrowable(granted.get(rc.pk, 0))
            for rc in with_pool
        }
    return out


def stop_work_over_quota(*, now: datetime | None = None) -> list[int]:
    """Apply the policy to every active team; returns the ids of the workloads stopped."""
    grace = settings.OVER_QUOTA_GRACE_S
    if grace < 0:
        return []
    now = now or timezone.now()
    running: dict[int, list[Workload]] = defaultdict(list)
    for w in Workload.objects.filter(
        state=Workload.State.RUNNING, tenant__status=Tenant.Status.ACTIVE
    ).select_related("tenant"):
        running[w.tenant_id].append(w)
    classes = list(ResourceClass.objects.select_related("pool"))
    allowed = _allowed(list(running), classes)
    held = (
        in_slices({rc.slug: rc for rc in classes})
        if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES
        else per_class
    )
    states = {s.tenant_id: s for s in TenantSyncState.objects.filter(tenant_id__in=list(running))}
    stopped: list[int] = []
    for tenant_id in set(running) | {t for t, s in states.items() if s.over_quota_since}:
        over = overage(running.get(tenant_id, []), allowed.get(tenant_id, {}), held)
        state = states.get(tenant_id) or TenantSyncState.objects.create(tenant_id=tenant_id)
        since = parse_datetime(state.over_quota_since) if state.over_quota_since else None
        if not over:
            if since:
                state.over_quota_since = ""
                state.save(update_fields=["over_quota_since"])
            continue
        if since is None:
            state.over_quota_since = now.isoformat()
            state.save(update_fields=["over_quota_since"])
            continue
        if now - since < timedelta(seconds=grace):
            continue
        victims = to_stop(running[tenant_id], allowed[tenant_id], held)
        stopped += _stop(victims, over, since)
        state.over_quota_since = ""
        state.save(update_fields=["over_quota_since"])
    return stopped


def _stop(victims: list[Workload], over: dict[str, int], since: datetime) -> list[int]:
    if not victims:
        return []
    tenant = victims[0].tenant
    what = ", ".join(f"{n} × {slug}" for slug, n in sorted(over.items()))
    message = (
        f"stopped by policy: {tenant.slug} has run {what} beyond its grant since "
        f"{since:%Y-%m-%d %H:%M %Z} (grace {settings.OVER_QUOTA_GRACE_S} s); lowest priority, "
        "newest first"
    )
    stopped = []
    with transaction.atomic():
        for w in victims:
            if change_state(w.pk, Observation(Workload.State.CANCELLED, "OverQuota", message)):
                stopped.append(w.pk)
                transaction.on_commit(partial(tasks.delete_workload.delay, workload_id=w.pk))
        if stopped:  # the owners by mail and the team's channels, after commit
            names = ", ".join(w.name for w in victims if w.pk in stopped)
            notify(
                "workload.stopped_over_quota",
                tenant,
                subject=f"[GPU Portal] {tenant.slug}: work stopped above the grant",
                text=f"{message}.\nStopped: {names}.\nAsk for more capacity at "
                f"{settings.PORTAL_BASE_URL} if the team still needs it.",
                data={"workloads": stopped},
            )
    log.info("stopped %s of %s over quota", stopped, tenant.slug)
    return stopped


@portal_task(name="scheduler.tasks.stop_work_over_quota")
def stop_work_over_quota_task() -> list[int]:
    return stop_work_over_quota()
