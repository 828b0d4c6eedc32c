"""A department's monthly budget watched as a team's is: its admins (and the platform's
channels, at 100 % and for the forecast) are told once a month when its teams' spend reaches
80 % and 100 % of it, and when the month-end forecast passes it first. Its spend is its teams'
statements summed, as the finance roll-up (`cost_rollups`) sums them, so the alert, the
department's usage page and the roll-up agree."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core import audit
from metering import pricing, selectors
from metering.models import BudgetAlert, DepartmentBudgetAlert
from tenants.models import Department, Tenant
from tenants.notifications import notify
from tenants.services.follow_up import portal_url


@dataclass(frozen=True)
class DepartmentSpend:
    state: selectors.BudgetState  # all its teams together against its own budget
    teams: list[tuple[Tenant, pricing.Statement]]  # the dearest first

    def as_dict(self, department: Department) -> dict:
        """As the API gives it: decimal strings (cents, and hours to 4 places), in
        BILLING_CURRENCY."""
        state = self.state

        def cents(value: Decimal | None) -> str | None:
            return None if value is None else str(pricing.money(value))

        return {
            "department": department.slug,
            "month": f"{state.month:%Y-%m}",
            "currency": settings.BILLING_CURRENCY,
            "cost": cents(state.cost),
            "budget": cents(state.budget),
            "percent": state.percent,
            "forecast": cents(state.forecast),
            "teams": [
                {
                    "tenant": tenant.slug,
                    "allocated_gpu_hours": str(
                        st.allocated_gpu_hours.quantize(pricing.HOURS_PLACES)
                    ),
                    "idle_cost": cents(st.idle_cost),
                    "total": cents(st.total),
                }
                for tenant, st in self.teams
            ],
        }


def spend(department: Department, month: date, now: datetime) -> DepartmentSpend:
    """What the department's teams cost in `month` (its teams now, as the roll-up counts)."""
    teams = list(Tenant.objects.filter(department=department).order_by("slug"))
    statements = selectors.month_statements(month, [t.pk for t in teams], now=now)
    rows = sorted(((t, statements[t.pk]) for t in teams), key=lambda r: (-r[1].total, r[0].slug))
    cost = sum((st.total for _, st in rows), Decimal(0))
    state = selectors.budget_state_of(month, cost, department.monthly_budget, now)
    return DepartmentSpend(state, rows)


def warn_department_budgets(*, now: datetime | None = None) -> list[DepartmentBudgetAlert]:
    """Every department with a budget: the warnings due this month and not sent yet (safe to
    run again: each is sent once)."""
    now = now or timezone.now()
    month = selectors.current_month(now)
    alerts = []
    for department in Department.objects.exclude(monthly_budget=None):
        state = spend(department, month, now).state
        if state.level:
            alerts.append(_warn(department, state, BudgetAlert.Kind.SPEND, state.level))
        if state.forecast_warning_due(now):
            alerts.append(_warn(department, state, BudgetAlert.Kind.FORECAST, 100))
    return [a for a in alerts if a is not None]


def _warn(
    department: Department, state: selectors.BudgetState, kind: str, threshold: int
) -> DepartmentBudgetAlert | None:
    """The alert, its audit event and its notification in one transaction; None when it was
    sent already (the unique row decides, so two beats cannot both send it)."""
    assert state.budget is not None  # only departments with a budget are warned
    key = {"department": department, "month": state.month, "kind": kind, "threshold": threshold}
    if DepartmentBudgetAlert.objects.filter(**key).exists():
        return None
    try:
        with transaction.atomic():
            alert = DepartmentBudgetAlert.objects.create(
                **key,
                cost=state.cost,
                budget=state.budget,
            )
            audit.record(
                actor=None,
                verb="department.budget_warned",
                obj=alert,
                tenant=None,
                after={
                    "department": department.slug,
                    "kind": kind,
                    "threshold": threshold,
                    "cost": str(state.cost),
                    "forecast": str(state.forecast),
                    "budget": str(state.budget),
                },
            )
            _notify(department, state, kind, threshold)
    except IntegrityError:
        return None
    return alert


def _notify(
    department: Department, state: selectors.BudgetState, kind: str, threshold: int
) -> None:
    cur = settings.BILLING_CURRENCY
    month = f"{state.month:%B %Y}"
    if kind == BudgetAlert.Kind.FORECAST:
        name = "department.budget_forecast_over"
        subject = f"[GPU Portal] {department.slug} is on course to pass its {month} budget"
        said = (
            f"{state.cost} {cur} spent so far; at this rate the month ends at "
            f"{state.forecast} {cur}, over its budget of {state.budget} {cur}."
        )
    else:
        name = f"department.budget_reached_{threshold}"
        subject = f"[GPU Portal] {department.slug} has used {state.percent} % of its {month} budget"
        said = f"{state.cost} {cur} of {state.budget} {cur} this month ({state.percent} %)."
    notify(
        name,
        None,
        department=department,
        subject=subject,
        text=(
            f"{department.name}, all its teams together: {said}\n"
            f"{portal_url('metering:department_usage', department.slug)}\n"
        ),
        data={
            "threshold": threshold,
            "cost": str(state.cost),
            "forecast": str(state.forecast),
            "budget": str(state.budget),
            "month": f"{state.month:%Y-%m}",
        },
    )
