"""Waste by team: GPUs held but not used (issue 30, item 3), ranked for the platform team.

A month's idle GPU-hours and their cost are the statements' own idle lines (allocated hours whose
utilisation DCGM reported, less the hours used, priced at the class's price in force each hour),
so the platform page, a team's statement and the chargeback export never disagree. Beside them,
what the idle give-back is doing now: the GPUs held by workloads idle at this moment (their idle
clock runs) and the workloads it suspended in the month.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.utils import timezone

from catalog.models import ResourceClass
from metering import pricing, selectors
from scheduler.workloads.lifecycle.suspending import IDLE_REASON
from scheduler.workloads.models import Workload, WorkloadEvent
from tenants.models import Tenant

ZERO = Decimal(0)


@dataclass(frozen=True)
class TeamWaste:
    slug: str
    name: str
    held_gpu_hours: Decimal  # GPU-equivalent hours allocated this month
    observed_gpu_hours: Decimal  # of those, with utilisation known
    idle_gpu_hours: Decimal  # of those, not used
    idle_cost: Decimal
    idle_now_gpus: Decimal  # held right now by workloads whose idle clock runs
    idle_now_workloads: int
    suspended: int  # workloads suspended for idleness this month

    @property
    def idle_pct(self) -> Decimal | None:
        """Idle share of the hours whose use is known (None: none known)."""
        if not self.observed_gpu_hours:
            return None
        return (self.idle_gpu_hours / self.observed_gpu_hours * 100).quantize(Decimal("0.1"))


def _idle_now() -> dict[int, tuple[Decimal, int]]:
    """tenant id -> (GPU-equivalents held, workloads) of running workloads idle right now."""
    fractions = dict(ResourceClass.objects.values_list("slug", "gpu_fraction"))
    out: dict[int, tuple[Decimal, int]] = {}
    for w in Workload.objects.filter(state=Workload.State.RUNNING, idle_since__isnull=False).only(
        "tenant_id", "kind", "replicas", "max_replicas", "held_replicas", "resources"
    ):
        # the pods that hold quota (an autoscaled service's admitted ones, a gang's N)
        pods = w.pods_held
        gpus = sum(
            (Decimal(n) * pods * fractions.get(slug, ZERO) for slug, n in w.resources.items()),
            ZERO,
        )
        held, count = out.get(w.tenant_id, (ZERO, 0))
        out[w.tenant_id] = (held + gpus, count + 1)
    return out


def _suspensions(month: date, now: datetime) -> dict[int, int]:
    """tenant id -> workloads suspended for idleness in the month (so far)."""
    window = selectors.month_window_until(month, now)
    out: dict[int, int] = defaultdict(int)
    for tenant_id in WorkloadEvent.objects.filter(
        state=Workload.State.SUSPENDED,
        reason=IDLE_REASON,
        created_at__gte=window.start,
        created_at__lt=window.end,
    ).values_list("workload__tenant_id", flat=True):
        out[tenant_id] += 1
    return out


def waste_by_team(
    month: date,
    *,
    now: datetime | None = None,
    statements: dict[int, pricing.Statement] | None = None,
) -> list[TeamWaste]:
    """Every team that held GPUs this month or holds idle ones now, the most idle cost first
    (then the most idle GPU-hours, then the most GPUs idle now). `statements`: every tenant's
    for the month, when the caller has them already."""
    now = now or timezone.now()
    tenants = list(Tenant.objects.order_by("slug").only("pk", "slug", "name"))
    if statements is None:
        statements = selectors.all_statements(month, now)
    idle_now = _idle_now()
    suspended = _suspensions(month, now)
    rows = []
    for t in tenants:
        lines = statements[t.pk].lines
        held = sum((line.allocated_gpu_hours for line in lines), ZERO)
        observed = sum((line.observed_hours * line.gpu_fraction for line in lines), ZERO)
        idle = sum((line.idle_hours * line.gpu_fraction for line in lines), ZERO)
        now_gpus, now_count = idle_now.get(t.pk, (ZERO, 0))
        if not (held or now_count or suspended.get(t.pk)):
            continue
        rows.append(
            TeamWaste(
                slug=t.slug,
                name=t.name,
                held_gpu_hours=held.quantize(Decimal("0.01")),
                observed_gpu_hours=observed.quantize(Decimal("0.01")),
                idle_gpu_hours=idle.quantize(Decimal("0.01")),
                idle_cost=statements[t.pk].idle_cost,
                idle_now_gpus=now_gpus,
                idle_now_workloads=now_count,
                suspended=suspended.get(t.pk, 0),
            )
        )
    rows.sort(key=lambda r: (-r.idle_cost, -r.idle_gpu_hours, -r.idle_now_gpus, r.slug))
    return rows
