"""What a fault may not lose, read from PostgreSQL and the cluster after recovery (Django is set
up in the harness process against the run's own database)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from django.db.models import Q

from faults.load import Load
from metering.models import AllocationInterval, IngestCursor, UsageSample
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.specs import build_specs, tenant_namespace
from scheduler.cluster.render.namespace import GPU_QUOTA, render_quotas
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.models import Workload
from tenants.models import AuditEvent, Tenant


def grants_behind(kube: KubeGateway) -> list[str]:
    """Tenants whose GPU quota on the cluster is not what their grants say right now."""
    tenants = list(Tenant.objects.filter(status=Tenant.Status.ACTIVE))
    specs = build_specs(tenants)
    behind = []
    for tenant in tenants:
        ns = tenant_namespace(tenant)
        want = render_quotas(specs[tenant.pk], ns)[0]["spec"]["hard"]
        live = (kube.get("ResourceQuota", GPU_QUOTA, ns) or {}).get("spec", {}).get("hard")
        gpu = {k: v for k, v in want.items() if k.startswith("requests.nvidia.com/")}
        if live is None or any(live.get(k) != v for k, v in gpu.items()):
            behind.append(tenant.slug)
    return behind


def workload_problems(kube: KubeGateway, load: Load) -> dict[str, list[str]]:
    """Acknowledged workloads missing, workloads created twice (rows or Jobs), live workloads
    the cluster does not have, cancelled ones it still has."""
    problems: dict[str, list[str]] = {"lost": [], "duplicated": []}
    acknowledged = set(load.workloads_acknowledged.values())
    known = set(Workload.objects.filter(pk__in=acknowledged).values_list("pk", flat=True))
    problems["lost"] += [
        f"workload {pk}: acknowledged, not in the database" for pk in acknowledged - known
    ]
    names = Counter(
        Workload.objects.filter(name__startswith="fault-").values_list("name", flat=True)
    )
    problems["duplicated"] += [f"{n}: {c} rows" for n, c in names.items() if c > 1]
    jobs: dict[str, list[dict]] = {}
    for tenant in Tenant.objects.all():
        ns = tenant_namespace(tenant)
        for job in kube.list("Job", ns, label_selector=WORKLOAD_LABEL):
            jobs.setdefault(job["metadata"]["labels"][WORKLOAD_LABEL], []).append(job)
    problems["duplicated"] += [
        f"workload {k}: {len(v)} Jobs" for k, v in jobs.items() if len(v) > 1
    ]
    for w in Workload.objects.filter(name__startswith="fault-"):
        on_cluster = str(w.pk) in jobs
        if w.state in (Workload.State.PENDING, Workload.State.QUEUED, Workload.State.RUNNING):
            if not on_cluster:
                problems["lost"].append(f"workload {w.pk} ({w.state}): no Job on the cluster")
        elif w.state == Workload.State.CANCELLED and on_cluster:
            live = [j for j in jobs[str(w.pk)] if not j["metadata"].get("deletionTimestamp")]
            if live:
                problems["lost"].append(f"workload {w.pk}: cancelled, Job still there")
    return problems


def audit_missing(load: Load) -> list[str]:
    missing = []
    checks = [
        ("capacity_request.submitted", load.requests_acknowledged),
        ("capacity_request.approved", load.approvals_acknowledged),
        ("workload.submitted", set(load.workloads_acknowledged.values())),
    ]
    for verb, ids in checks:
        found = set(
            AuditEvent.objects.filter(verb=verb, object_id__in=[str(i) for i in ids]).values_list(
                "object_id", flat=True
            )
        )
        missing += [f"{verb} {i}" for i in ids if str(i) not in found]
    return missing


def ingest_caught_up(since: datetime) -> bool:
    cursor = IngestCursor.objects.first()
    return cursor is not None and cursor.last_at > since


def metering_gaps(start: datetime, end: datetime) -> list[str]:
    """Whole minutes in [start, end) in which a team's pod held a GPU the whole minute but no
    sample says so."""
    first = start.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    last = end.astimezone(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    gaps = []
    at = first
    while at <= last:
        held = (
            AllocationInterval.objects.filter(tenant__isnull=False, resource_class__isnull=False)
            .filter(started_at__lte=at)
            .filter(Q(ended_at__isnull=True) | Q(ended_at__gte=at + timedelta(minutes=1)))
            .values_list("tenant_id", "resource_class_id")
            .distinct()
        )
        for tenant_id, rc_id in held:
            if not UsageSample.objects.filter(
                at=at, tenant_id=tenant_id, resource_class_id=rc_id, allocated__gt=0
            ).exists():
                gaps.append(f"{at:%H:%M} tenant {tenant_id} class {rc_id}")
        at += timedelta(minutes=1)
    return gaps
