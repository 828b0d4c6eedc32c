"""The submit form's preview (issue 49, 5), as the ask form has one: what the workload costs an
hour at list price and against the team's budget this month, and whether it starts now, queues
(behind what, and why) or can never fit. Every number comes from the rule that decides it:
admission's refusals (`submit.admission.check_ask`), the queue's explanation
(`queue.waiting.explain` over `selectors.waiting_facts`), the ask form's cost arithmetic
(`tenants.asking.cost_estimate`) and metering's month (`tenants.hooks.budget_left`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from catalog import run_limits
from catalog.models import ResourceClass
from core.errors import QuotaExceeded
from scheduler.workloads.models import Workload
from scheduler.workloads.queue import waiting
from scheduler.workloads.selectors import waiting_facts
from scheduler.workloads.submit import admission
from tenants import asking, hooks
from tenants.models import Tenant
from tenants.models.priority_classes import PRIORITY_CLASS_DEFS

STARTS = "starts"
QUEUES = "queues"
NEVER = "never"
# A refusal of these fields says the ask can never run as it is (no waiting helps).
NEVER_FIELDS = ("resources", "pods", "autoscaling", "units")


@dataclass(frozen=True)
class Preview:
    rc: ResourceClass
    units: int  # all its pods together
    cost: asking.CostEstimate
    max_run: str  # a job's maximum run time in words ("" for none)
    outcome: str  # STARTS | QUEUES | NEVER
    why: str
    behind: list[str]
    spent: Decimal | None = None
    budget: Decimal | None = None

    @property
    def budget_left(self) -> Decimal | None:
        if self.budget is None or self.spent is None:
            return None
        return self.budget - self.spent

    @property
    def hours_of_budget(self) -> int | None:
        """How many hours of this workload the rest of the month's budget pays for."""
        left = self.budget_left
        if left is None or not self.cost.per_hour:
            return None
        return max(0, int(left / self.cost.per_hour))


def preview(tenant: Tenant, ask: admission.Ask, rc: ResourceClass | None) -> Preview | None:
    """None until a class, units and a size are chosen."""
    if rc is None or not ask.resources or ask.pods is None or ask.kind is None:
        return None
    units = sum(ask.resources.values()) * ask.pods
    now = timezone.now()
    limit = (
        admission.max_run_s(tenant, ask.kind, [(rc, units)])
        if ask.kind == Workload.Kind.JOB
        else None
    )
    cost = asking.cost_estimate(
        price_per_hour=rc.price_per_hour,
        amount=units,
        starts_at=now,
        ends_at=now + timedelta(seconds=limit) if limit else None,
    )
    outcome, why, behind = _outcome(tenant, ask, rc)
    month = hooks.budget_left(tenant)  # None: no budget this month
    spent, budget = (month["spent"], month["budget"]) if month else (None, None)
    return Preview(
        rc=rc,
        units=units,
        cost=cost,
        max_run=run_limits.duration_words(limit) if limit else "",
        outcome=outcome,
        why=why,
        behind=behind,
        spent=spent,
        budget=budget,
    )


def _outcome(tenant: Tenant, ask: admission.Ask, rc: ResourceClass) -> tuple[str, str, list[str]]:
    never = [
        exc.detail
        for field, exc in admission.check_ask(tenant, ask).refused
        if field in NEVER_FIELDS
        and (isinstance(exc, QuotaExceeded) or exc.code == "pool_too_small")
    ]
    if never:
        return NEVER, "; ".join(never), []
    # the queue's own explanation, as if it were queued now behind the team's waiting work
    draft = Workload(
        tenant=tenant,
        kind=ask.kind or Workload.Kind.JOB,
        resources=dict(ask.resources or {}),
        gpu_model=rc.gpu_model,
        replicas=ask.pods or 1,
        priority_class=ask.priority or "",
        state=Workload.State.QUEUED,
    )
    said = waiting.explain(waiting_facts(draft))
    behind = _ahead(tenant, ask.priority or "")
    if said is not None and said.code != "in_queue":
        return QUEUES, said.reason, behind
    if behind:
        return (
            QUEUES,
            "The team's quota and the fleet have room, but work ahead goes first.",
            behind,
        )
    return STARTS, "The team's quota and the fleet have room for it now.", []


def _ahead(tenant: Tenant, priority: str) -> list[str]:
    """The team's waiting work that goes before a new workload: the queue orders by priority,
    then age, so all of it at the same priority or higher."""
    values = {pc.name: pc.value for pc in PRIORITY_CLASS_DEFS}
    mine = values.get(priority, 0)
    rows = Workload.objects.filter(tenant=tenant, state__in=waiting.WAITING_STATES).order_by(
        "queue_position", "created_at", "id"
    )
    return [
        f"{w.name} ({w.priority_class}"
        + (f", position {w.queue_position})" if w.queue_position else ")")
        for w in rows.only("name", "priority_class", "queue_position")
        if values.get(w.priority_class, 0) >= mine
    ][:5]
