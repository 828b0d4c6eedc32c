"""The month's statements rolled up by cost centre (issue 34, item 2): what finance books, per
cost centre, with the teams under it. The figures are the teams' statements summed, so the
roll-up, the statements and the chargeback export always agree."""

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
class CostCentre:
    name: str
    teams: list[str] = field(default_factory=list)
    allocated_gpu_hours: Decimal = ZERO
    allocated_cost: Decimal = ZERO
    quota_cost: Decimal = ZERO
    idle_cost: Decimal = ZERO
    total: Decimal = ZERO  # what the statements bill (or show, in showback)
    budget: Decimal = ZERO
    forecast: Decimal = ZERO

    def as_dict(self) -> dict:
        return {
            "cost_centre": self.name,
            "teams": ",".join(self.teams),
            **{k: str(getattr(self, k)) for k in MONEY_FIELDS},
        }


def by_cost_centre(month: date, *, now: datetime | None = None) -> list[CostCentre]:
    """One row per cost centre that holds a team, the dearest first."""
    now = now or timezone.now()
    tenants = list(Tenant.objects.order_by("slug").only("pk", "slug", "cost_centre"))
    statements = selectors.month_statements(month, [t.pk for t in tenants], now=now)
    budgets = selectors.budgets_for_month(month)
    full = pricing.month_window(month, selectors.billing_tz())
    rows: dict[str, CostCentre] = defaultdict(lambda: CostCentre(name=""))
    for t in tenants:
        st = statements[t.pk]
        row = rows[t.cost_centre]
        row.name = t.cost_centre
        row.teams.append(t.slug)
        row.allocated_gpu_hours += st.allocated_gpu_hours
        row.allocated_cost += st.allocated_cost
        row.quota_cost += st.quota_cost
        row.idle_cost += st.idle_cost
        row.total += st.total
        row.budget += budgets.get(t.pk, ZERO)
        row.forecast += pricing.month_end_forecast(st.total, full, now)
    return sorted(rows.values(), key=lambda r: (-r.total, r.name))
