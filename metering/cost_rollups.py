"""The month's statements rolled up by cost centre or by department (issue 34, item 2): what
finance books, per cost centre or department, with the teams under it. The figures are the teams'
statements summed, so the roll-ups, the statements and the chargeback export always agree. A
department's budget is its own (else its teams' summed); a cost centre's is its teams'."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

from django.utils import timezone

from metering import pricing, selectors
from tenants.models import Tenant

NO_CENTRE = ""  # teams without a cost centre are rolled up together, said so on the page
ZERO = Decimal(0)
MONEY_FIELDS = (
    "allocated_gpu_hours",
    "allocated_cost",
    "quota_cost",
    "idle_cost",
    "total",
    "budget",
    "forecast",
)


@dataclass
class CostRollup:
    name: str
    teams: list[str] = field(default_factory=list)
    allocated_gpu_hours: Decimal = ZERO
    allocated_cost: Decimal = ZERO
    quota_cost: Decimal = ZERO
    idle_cost: Decimal = ZERO
    total: Decimal = ZERO  # what the statements bill (or show, in showback)
    budget: Decimal = ZERO
    forecast: Decimal = ZERO

    def as_dict(self, by: str = "cost_centre") -> dict:
        return {
            by: self.name,
            "teams": ",".join(self.teams),
            **{k: str(getattr(self, k)) for k in MONEY_FIELDS},
        }


BY = ("cost_centre", "department")


def roll_up(
    month: date,
    by: str,
    *,
    now: datetime | None = None,
    statements: dict[int, pricing.Statement] | None = None,
) -> list[CostRollup]:
    """One row per cost centre or department (`by`) that holds a team, the dearest first;
    teams with none are one row named ''. `statements`: every tenant's for the month, when the
    caller has them already."""
    if by not in BY:
        raise ValueError(f"roll up by one of {', '.join(BY)}, not {by!r}")
    now = now or timezone.now()
    tenants = list(
        Tenant.objects.order_by("slug")
        .select_related("department")
        .only("pk", "slug", "cost_centre", "department__slug", "department__monthly_budget")
    )
    if statements is None:
        statements = selectors.all_statements(month, now)
    budgets = selectors.budgets_for_month(month)
    full = pricing.month_window(month, selectors.billing_tz())
    rows: dict[str, CostRollup] = defaultdict(lambda: CostRollup(name=""))
    own_budgets = {}
    for t in tenants:
        st = statements[t.pk]
        key = t.cost_centre if by == "cost_centre" else (t.department.slug if t.department else "")
        if by == "department" and t.department and t.department.monthly_budget is not None:
            own_budgets[key] = t.department.monthly_budget
        row = rows[key]
        row.name = key
        row.teams.append(t.slug)
        row.allocated_gpu_hours += st.allocated_gpu_hours
        row.allocated_cost += st.allocated_cost
        row.quota_cost += st.quota_cost
        row.idle_cost += st.idle_cost
        row.total += st.total
        row.budget += budgets.get(t.pk, ZERO)
        row.forecast += pricing.month_end_forecast(st.total, full, now)
    for key, budget in own_budgets.items():
        rows[key].budget = budget
    return sorted(rows.values(), key=lambda r: (-r.total, r.name))
