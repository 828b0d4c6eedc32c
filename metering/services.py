"""Writes of metering that people make or that change state: prices, budgets, budget warnings,
and the admission check that refuses work of a tenant over budget. Each writes one audit event
in its transaction."""

from __future__ import annotations

import logging
from datetime import date, datetime
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from catalog.models import ResourceClass
from core import audit, bounds
from core.errors import Forbidden, InvalidInput, ServiceError
from core.permissions import is_platform_admin
from metering import selectors
from metering.models import Budget, BudgetAlert, PriceRule
from tenants.models import Membership, Tenant
from tenants.notifications import notify
from tenants.permissions import role_in

log = logging.getLogger(__name__)


class OverBudget(ServiceError):
    code = "over_budget"
    status = 409


def _amount(value, field: str, column) -> Decimal:
    """A money amount ≥ 0 that `column` (a DecimalField) can store, or a 400 that says why."""
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise InvalidInput(f"{field} must be a number", field=field) from None
    if not amount.is_finite() or amount < 0:
        raise InvalidInput(f"{field} must be ≥ 0", field=field)
    return bounds.decimal_for(amount, column, field)


def set_price(
    *, actor, resource_class: ResourceClass, price_per_hour, effective_from: datetime
) -> PriceRule:
    """The class's price from `effective_from` on (a rule at the same instant is replaced)."""
    if not is_platform_admin(actor):
        raise Forbidden("only the platform team sets prices")
    price = _amount(price_per_hour, "price_per_hour", PriceRule._meta.get_field("price_per_hour"))
    if timezone.is_naive(effective_from):
        raise InvalidInput("effective_from needs a time zone", field="effective_from")
    with transaction.atomic():
        rule = (
            PriceRule.objects.select_for_update()
            .filter(resource_class=resource_class, effective_from=effective_from)
            .first()
        )
        before = {"price_per_hour": str(rule.price_per_hour)} if rule else None
        if rule is None:
            rule = PriceRule(resource_class=resource_class, effective_from=effective_from)
        rule.price_per_hour = price
        rule.created_by = actor
        rule.save()
        audit.record(
            actor=actor,
            verb="price.set",
            obj=rule,
            tenant=None,
            before=before,
            after={
                "resource_class": resource_class.slug,
                "price_per_hour": str(price),
                "effective_from": effective_from.isoformat(),
            },
        )
    return rule


def can_set_budget(user, tenant: Tenant) -> bool:
    """The platform team, and the team's owners (the page shows the form to them alone)."""
    return is_platform_admin(user) or role_in(user, tenant) == Membership.Role.OWNER


def set_budget(*, actor, tenant: Tenant, month: date, amount) -> Budget:
    """The platform team sets any budget. A team's owners set their own team's budget for this
    month or a later one; while budgets are enforced (BUDGET_ENFORCE refuses new work over
    budget) they may set or lower one, but raising it is the platform team's: otherwise an
    owner could lift the limit the platform holds them to."""
    admin = is_platform_admin(actor)
    if not can_set_budget(actor, tenant):
        raise Forbidden(f"only {tenant.slug}'s owners and the platform team set its budget")
    value = _amount(amount, "amount", Budget._meta.get_field("amount"))
    month = month.replace(day=1)
    if not admin and month < selectors.current_month():
        raise InvalidInput(
            f"{month:%B %Y} is over: set this month's budget or a later one", field="month"
        )
    with transaction.atomic():
        budget = Budget.objects.select_for_update().filter(tenant=tenant, month=month).first()
        if not admin and settings.BUDGET_ENFORCE:
            held_to = budget.amount if budget else tenant.monthly_budget
            if held_to is not None and value > held_to:
                raise Forbidden(
                    f"budgets are enforced: {tenant.slug}'s owners may lower its budget for "
                    f"{month:%B %Y} (now {held_to} {settings.BILLING_CURRENCY}) but not raise it; "
                    "ask the platform team",
                    field="amount",
                )
        before = {"amount": str(budget.amount)} if budget else None
        if budget is None:
            budget = Budget(tenant=tenant, month=month)
        budget.amount = value
        budget.save()
        audit.record(
            actor=actor,
            verb="budget.set",
            obj=budget,
            tenant=tenant,
            before=before,
            after={"month": month.isoformat(), "amount": str(value)},
        )
    return budget


def warn_budgets(*, now: datetime | None = None) -> list[BudgetAlert]:
    """Every active tenant with a budget this month: warn those at 80 % or 100 %, and those
    whose month-end forecast passes the budget (statements computed in one batch)."""
    now = now or timezone.now()
    month = selectors.current_month(now)
    budgets = selectors.budgets_for_month(month)
    tenants = list(Tenant.objects.filter(status=Tenant.Status.ACTIVE, pk__in=budgets))
    statements = selectors.month_statements(month, [t.pk for t in tenants], now=now)
    alerts = []
    for tenant in tenants:
        state = selectors.budget_state_of(
            month, statements[tenant.pk].total, budgets[tenant.pk], now
        )
        for alert in (warn_budget(tenant, now=now, state=state), warn_forecast(tenant, state, now)):
            if alert is not None:
                alerts.append(alert)
    return alerts


def _once(
    tenant: Tenant, state: selectors.BudgetState, kind: str, threshold: int
) -> BudgetAlert | None:
    """The alert row of this month, kind and threshold, made under the tenant's row lock; None
    when it was already sent (inside the caller's transaction)."""
    assert state.budget is not None  # an alert is only ever about a budget
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
    if BudgetAlert.objects.filter(
        tenant=tenant, month=state.month, kind=kind, threshold=threshold
    ).exists():
        return None
    return BudgetAlert.objects.create(
        tenant=tenant,
        month=state.month,
        kind=kind,
        threshold=threshold,
        cost=state.cost,
        budget=state.budget,
    )


def warn_forecast(
    tenant: Tenant, state: selectors.BudgetState, now: datetime
) -> BudgetAlert | None:
    """Warn the owners once a month when the month-end forecast passes the budget before the
    spend does, once BUDGET_FORECAST_AFTER_H hours of the month have given a burn rate."""
    if not state.forecast_warning_due(now):
        return None
    cur = settings.BILLING_CURRENCY
    with transaction.atomic():
        alert = _once(tenant, state, BudgetAlert.Kind.FORECAST, 100)
        if alert is None:
            return None
        audit.record(
            actor=None,
            verb="budget.forecast_warned",
            obj=alert,
            tenant=tenant,
            after={
                "cost": str(state.cost),
                "forecast": str(state.forecast),
                "budget": str(state.budget),
            },
        )
        notify(
            "budget.forecast_over",
            tenant,
            subject=(
                f"[GPU Portal] {tenant.slug} is on course to pass its {state.month:%B %Y} budget"
            ),
            text=(
                f"{tenant.name}: {state.cost} {cur} spent so far; at this rate the month ends at "
                f"{state.forecast} {cur}, over its budget of {state.budget} {cur}.\n"
                f"{settings.PORTAL_BASE_URL}/usage/teams/{tenant.slug}/\n"
            ),
            data={
                "cost": str(state.cost),
                "forecast": str(state.forecast),
                "budget": str(state.budget),
                "month": f"{state.month:%Y-%m}",
            },
        )
    return alert


def warn_budget(
    tenant: Tenant, *, now: datetime | None = None, state: selectors.BudgetState | None = None
) -> BudgetAlert | None:
    """Send the tenant's owners the 80 % or 100 % warning of this month, once each."""
    state = state or selectors.budget_state(tenant, now)
    if not state.level or state.budget is None:
        return None
    with transaction.atomic():
        alert = _once(tenant, state, BudgetAlert.Kind.SPEND, state.level)
        if alert is None:
            return None
        audit.record(
            actor=None,
            verb="budget.warned",
            obj=alert,
            tenant=tenant,
            after={"threshold": state.level, "cost": str(state.cost), "budget": str(state.budget)},
        )
        subject = (
            f"[GPU Portal] {tenant.slug} has used {state.percent} % of its "
            f"{state.month:%B %Y} budget"
        )
        cur = settings.BILLING_CURRENCY
        body = (
            f"{tenant.name}: {state.cost} {cur} of {state.budget} {cur} this month "
            f"({state.percent} %).\n{settings.PORTAL_BASE_URL}/usage/teams/{tenant.slug}/\n"
        )
        if settings.BUDGET_ENFORCE and state.level >= 100:
            body += "New workloads are refused until the budget is raised or the month ends.\n"
        # The owners by e-mail and the team's (and platform's) channels, after commit.
        notify(
            f"budget.reached_{100 if state.level >= 100 else 80}",
            tenant,
            subject=subject,
            text=body,
            data={
                "threshold": state.level,
                "percent": str(state.percent),
                "cost": str(state.cost),
                "budget": str(state.budget),
                "month": f"{state.month:%Y-%m}",
            },
        )
    return alert


def over_budget_tenants(tenant_ids: list[int], *, now: datetime | None = None) -> set[int]:
    """Of these tenants, those whose cost this month has reached their budget while
    BUDGET_ENFORCE is on: the reconciler holds their Kueue LocalQueue, so new work waits
    whoever submits it (kubectl included) and running work goes on."""
    if not settings.BUDGET_ENFORCE:
        return set()
    budgets = selectors.budgets_for_month(selectors.current_month(now))
    held = set()
    for tenant in Tenant.objects.filter(pk__in=[t for t in tenant_ids if t in budgets]):
        state = selectors.budget_state(tenant, now)
        if state.budget is not None and state.cost >= state.budget:
            held.add(tenant.pk)
    return held


def check_budget(tenant: Tenant, *, now: datetime | None = None) -> None:
    """Admission: with BUDGET_ENFORCE on, refuse a tenant whose cost this month has reached its
    budget. It answers the `workload_admission` hook (portal/wiring.py)."""
    if not settings.BUDGET_ENFORCE:
        return
    state = selectors.budget_state(tenant, now)
    if state.budget is not None and state.cost >= state.budget:
        cur = settings.BILLING_CURRENCY
        raise OverBudget(
            f"{tenant.slug} has spent {state.cost} {cur} of its {state.budget} {cur} budget for "
            f"{state.month:%B %Y}: new workloads are refused until the budget is raised",
            code="over_budget",
        )
