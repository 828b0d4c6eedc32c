"""Usage pages: a team's dashboard and statement, the platform dashboard, and their exports.
Thin: they read through `metering.selectors` and render; numbers come from the same functions as
the API's."""

from __future__ import annotations

import functools
import json
import zoneinfo
from datetime import date, timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.errors import Forbidden, ServiceError
from core.permissions import platform_admin_required
from metering import (
    cost_rollups,
    department_budgets,
    exports,
    fleet_cost,
    pricing,
    selectors,
    services,
    waste,
)
from metering.api.views import csv_response, statement_dicts
from metering.models import AllocationInterval, DepartmentBudgetAlert
from scheduler.workloads.models import Workload
from tenants import display
from tenants.models import Department, Tenant
from tenants.services.departments import can_see_department_spend

TZ_SESSION_KEY = "metering_tz"


def display_tz(request) -> str:
    """The viewer's time zone: `?tz=` (remembered in the session), else the session's, else
    settings.TIME_ZONE. Times are stored in UTC and only converted for display."""
    asked = request.GET.get("tz")
    if asked:
        try:
            zoneinfo.ZoneInfo(asked)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            asked = None
        else:
            request.session[TZ_SESSION_KEY] = asked
    return asked or request.session.get(TZ_SESSION_KEY) or settings.TIME_ZONE


class BadQuery(Exception):
    """A query value a page cannot use: a 400 page that says what to change."""


def answers_bad_query(view):
    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except BadQuery as exc:
            context = {"detail": str(exc), "back": request.path}
            return render(request, "metering/bad_query.html", context, status=400)

    return wrapper


def _month(request) -> date:
    try:
        return selectors.parse_month(request.GET.get("month"))
    except ValueError as exc:
        raise BadQuery(str(exc)) from None


def _basis(request) -> str:
    basis = request.GET.get("basis") or settings.BILLING_BASIS
    return basis if basis in pricing.BASES else settings.BILLING_BASIS


def _team(request, slug) -> Tenant:
    return get_object_or_404(Tenant.objects.visible_to(request.user), slug=slug)


@login_required
@answers_bad_query
def team_usage(request, slug):
    return _render_team_usage(request, _team(request, slug))


def _render_team_usage(request, tenant: Tenant, budget_form: dict | None = None, status=200):
    tz = display_tz(request)
    month, basis = _month(request), _basis(request)
    # override, not activate: an activated zone stays with the thread, so its next request
    # (anyone's) would show times in this viewer's zone
    context = _team_usage(tenant, tz, month, basis)
    context["can_set_budget"] = services.can_set_budget(request.user, tenant)
    # a refused budget: the error at its field, and what was typed kept
    context["budget_form"] = budget_form or {}
    with timezone.override(zoneinfo.ZoneInfo(tz)):
        return render(request, "metering/team_usage.html", context, status=status)


@login_required
@answers_bad_query
def department_usage(request, slug):
    """A department's spend this month against its budget, by team: for its admins and the
    platform team (a member of one of its teams sees the department, not its teams' costs)."""
    department = get_object_or_404(Department.objects.visible_to(request.user), slug=slug)
    if not can_see_department_spend(request.user, department):
        raise PermissionDenied(f"only {department.slug}'s admins and platform admins see its spend")
    month, now = _month(request), timezone.now()
    spent = department_budgets.spend(department, month, now)
    context = {
        "department": department,
        "month": month,
        "budget": spent.state,
        "teams": spent.teams,
        "alerts": DepartmentBudgetAlert.objects.filter(department=department, month=month),
    }
    return render(request, "metering/department_usage.html", context)


@login_required
@require_POST
def team_budget(request, slug):
    """An owner (or the platform team) sets the team's budget for a month; a refusal is a 400
    that shows the usage page with the reason at its field and what was typed kept, a forbidden
    one a 403."""
    tenant = _team(request, slug)
    # set from the team page (issue 49, 8): back there; else the usage page
    if request.POST.get("back") == "team":
        back = redirect("team_detail", slug=tenant.slug)
    else:
        back = redirect("metering:team_usage", slug=tenant.slug)
    typed = {k: request.POST.get(k, "").replace("\x00", "")[:40] for k in ("month", "amount")}

    def refused(field: str, why: str):
        form = {**typed, "field": field, "error": f"Budget not set: {why}"}
        return _render_team_usage(request, tenant, form, status=400)

    try:
        month = selectors.parse_month(request.POST.get("month") or None)
    except ValueError as exc:
        return refused("month", f"{exc}.")
    try:
        budget = services.set_budget(
            actor=request.user, tenant=tenant, month=month, amount=request.POST.get("amount", "")
        )
    except Forbidden as exc:
        raise PermissionDenied(exc.detail) from None
    except ServiceError as exc:
        return refused(exc.field or "amount", exc.detail)
    messages.success(
        request,
        f"{tenant.name}'s budget for {budget.month:%B %Y} is {budget.amount} "
        f"{settings.BILLING_CURRENCY}.",
    )
    return back


def next_month_link(month: date, current: date) -> date | None:
    """The month after `month`, unless it is still to come: no link to a future month."""
    following = pricing.next_month(month)
    return following if following <= current else None


def chart_figures(series: dict, step: str, names: dict[str, str]) -> list[dict]:
    """One figure per series, with a note where there are too few points to draw a line."""
    figures = []
    for key, points in series.items():
        n = len(points.get("t", []))
        note = ""
        if n < 2:
            note = f"Only {n} {step} of data so far: the chart draws a line from two {step}s on."
        figures.append({"key": key, "name": names.get(key, key), "points": n, "note": note})
    return figures


def _team_usage(tenant: Tenant, tz: str, month: date, basis: str) -> dict:
    statement = statement_dicts([tenant], month, basis)[0]
    return {
        "tenant": tenant,
        "month": month,
        "basis": basis,
        "bases": pricing.BASES,
        "tz": tz,
        "statement": statement,
        "budget": selectors.budget_state(tenant),
        "enforce": settings.BUDGET_ENFORCE,
        "series": (series := selectors.team_series(tenant)),
        "charts": chart_figures(series, "hour", display.class_names()),
        "low_use": selectors.low_use_holders(tenant),
        "by_workload": _by_workload(tenant, month),
        "intervals": AllocationInterval.objects.with_seen_until()
        .filter(tenant=tenant)
        .select_related("resource_class")
        .order_by("-started_at")[:50],
        # no link beyond the months a statement can be asked for
        "prev_month": (
            pricing.month_start(month - timedelta(days=1))
            if month > selectors.FIRST_MONTH
            else None
        ),
        "next_month": next_month_link(month, selectors.current_month()),
    }


def _by_workload(tenant: Tenant, month: date) -> list[tuple[Workload, Decimal]]:
    """The month's cost split by workload: the figure each workload's page and the API show."""
    costs = selectors.month_workload_costs(tenant, month, timezone.now())
    rows = Workload.objects.in_bulk([pk for pk, _ in costs])
    return [(rows[pk], cost) for pk, cost in costs if pk in rows]


@login_required
@answers_bad_query
def team_statement_export(request, slug, fmt):
    tenant = _team(request, slug)
    month = _month(request)
    rows = statement_dicts([tenant], month, _basis(request))
    if fmt == "csv":
        return csv_response(rows, f"gpu-statement-{tenant.slug}-{month:%Y-%m}.csv")
    return JsonResponse(rows[0])


@platform_admin_required
@answers_bad_query
def platform_usage(request):
    tz = display_tz(request)
    try:
        days = max(1, min(int(request.GET.get("days", 30)), 366))
    except ValueError:
        days = 30
    month = _month(request)
    with timezone.override(zoneinfo.ZoneInfo(tz)):  # not activate: see team_usage
        return render(request, "metering/platform_usage.html", _platform_usage(tz, days, month))


def _platform_usage(tz: str, days: int, month: date) -> dict:
    data = selectors.platform_series(days=days)
    costs = selectors.cost_by_tenant(month)
    # every tenant's statement once, for the fleet split, the waste ranking and the roll-ups
    now = timezone.now()
    statements = selectors.all_statements(month, now)
    return {
        "charts": chart_figures(data["series"], "day", {}),
        "days": days,
        "month": month,
        "tz": tz,
        "data": data,
        "costs": costs[:25],
        "idle_month": selectors.idle_hours_this_month(month),
        "waste": (wasted := waste.waste_by_team(month, now=now, statements=statements)[:25]),
        # unknown is not zero (issue 49, 8): did any source report utilisation on their GPUs?
        "waste_known": any(row.idle_pct is not None for row in wasted),
        "fleet": fleet_cost.fleet_cost(month, now=now, statements=statements),
        "cost_centres": cost_rollups.roll_up(month, "cost_centre", now=now, statements=statements),
        "departments": [
            d
            for d in cost_rollups.roll_up(month, "department", now=now, statements=statements)
            if d.name
        ],
        "costs_data": [[slug, float(c)] for slug, c in costs[:25]],
    }


@platform_admin_required
@answers_bad_query
def chargeback_export(request, fmt):
    month = _month(request)
    rows = statement_dicts(list(Tenant.objects.order_by("slug")), month, _basis(request))
    if fmt == "csv":
        return csv_response(rows, f"gpu-chargeback-{month:%Y-%m}.csv")
    return HttpResponse(json.dumps(rows, indent=1), content_type="application/json")


ROLL_UPS = {"cost-centres": "cost_centre", "departments": "department"}


@platform_admin_required
@answers_bad_query
def roll_up_export(request, by, fmt):
    """The month's statements rolled up by cost centre or department, for finance (CSV or
    JSON)."""
    if by not in ROLL_UPS:
        raise Http404("roll up by cost-centres or departments")
    key = ROLL_UPS[by]
    month = _month(request)
    head = {
        "month": f"{month:%Y-%m}",
        "currency": settings.BILLING_CURRENCY,
        "mode": settings.BILLING_MODE,
    }
    rows = [{**head, **row.as_dict(key)} for row in cost_rollups.roll_up(month, key)]
    if fmt == "csv":
        fields = [*head, key, "teams", *cost_rollups.MONEY_FIELDS]
        response = HttpResponse(
            exports.rows_csv(rows, fields, frozenset(cost_rollups.MONEY_FIELDS)),
            content_type="text/csv; charset=utf-8",
        )
        response["Content-Disposition"] = f'attachment; filename="gpu-{by}-{month:%Y-%m}.csv"'
        return response
    return HttpResponse(json.dumps(rows, indent=1), content_type="application/json")
