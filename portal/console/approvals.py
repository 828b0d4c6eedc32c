"""The approval queue (`/console/`): pending asks with filters, sort, age and cost, each beside
its team's budget this month (spent, left; an ask costing more in a month than is left is
flagged); decisions per row with their own note, or for a selection with one comment; the same
services as the API. A refused decision (a reject without a reason) shows the queue again as it
was, not emptied."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from catalog.models import ResourceClass
from core import bounds
from core.errors import ServiceError
from core.permissions import platform_admin_required
from metering.selectors import budgets_left
from tenants import display
from tenants.asking import cost_estimate
from tenants.models import CapacityRequest, CapacityRequestItem, Tenant
from tenants.selectors import pool_summary
from tenants.services import approvals as approval_services
from tenants.services import requests as request_services

_REQUEST_ID = re.compile(r"[0-9]{1,18}", re.ASCII)  # a primary key, never past bigint
_ONE = re.compile(r"(approve|reject):([0-9]{1,18})", re.ASCII)  # a row's own button
# a grouped row's button: its identical asks, the shown one first
_MANY = re.compile(r"(approve|reject):([0-9]{1,18}(?:,[0-9]{1,18}){1,999})", re.ASCII)
PER_PAGE = 25

AGE_CHOICES = [
    ("", "Any age"),
    ("1", "Waiting over 1 day"),
    ("3", "Over 3 days"),
    ("7", "Over a week"),
]
SORT_CHOICES = [
    ("oldest", "Oldest first"),
    ("newest", "Newest first"),
    ("cost", "Costliest first"),
    ("team", "By team"),
]


@dataclass(frozen=True)
class QueueFilters:
    """What the queue is narrowed to and sorted by, read from the query string (anything
    unknown is ignored, never an error)."""

    tenant: str = ""
    resource_class: str = ""
    min_age_days: int = 0
    sort: str = "oldest"

    @classmethod
    def from_query(cls, query) -> QueueFilters:
        age = query.get("age", "")
        sort = query.get("sort", "")
        return cls(
            tenant=_slug(query.get("tenant", ""), 40),
            resource_class=_slug(query.get("class", ""), 80),
            min_age_days=int(age) if age in dict(AGE_CHOICES) and age else 0,
            sort=sort if sort in dict(SORT_CHOICES) else "oldest",
        )


def _slug(value: str, limit: int) -> str:
    """A slug to filter by; one no row can hold (a NUL) is unknown, so ignored."""
    return value[:limit] if bounds.storable(value) else ""


@dataclass(frozen=True)
class QueueRow:
    request: CapacityRequest
    age: timedelta
    per_hour: Decimal
    total: Decimal | None  # to the ask's end; None when open-ended
    items: list[tuple[int, ResourceClass, int]]  # amount, class, free in its pool
    reasons: tuple[str, ...] = ()  # the policy's, with display names
    error: str = ""  # why this row's own decision was refused
    also: tuple[int, ...] = ()  # ids of identical asks shown in this row (grouped)
    per_month: Decimal = Decimal(0)  # at the hourly price, held a whole month
    budget: dict | None = None  # the team's this month (metering's budget_left); None: none set

    @property
    def month_cost(self) -> Decimal:
        """What the row's asks add to a month: a month at their hourly price, or all they cost
        when they end sooner (a one-day ask does not cost a month)."""
        each = self.per_month if self.total is None else min(self.per_month, self.total)
        return each * self.count

    @property
    def over_budget(self) -> bool:
        """Costs more in a month than the team's budget has left."""
        return self.budget is not None and self.month_cost > self.budget["left"]

    @property
    def ids(self) -> str:
        return ",".join(str(pk) for pk in (self.request.pk, *self.also))

    @property
    def count(self) -> int:
        return 1 + len(self.also)


def _sameness(row: QueueRow) -> tuple:
    """What makes two asks identical for the one deciding: team, who, what, until, why."""
    r = row.request
    what = tuple(sorted((rc.pk, amount) for amount, rc, _ in row.items))
    return (r.tenant_id, r.requester_id, what, r.ends_at.date() if r.ends_at else None,
            r.justification.strip())  # fmt: skip


def group_rows(rows: list[QueueRow]) -> list[QueueRow]:
    """Identical asks (same team, asker, items, end day and reason) in one row, at the place of
    the first in the order given: forty copies of one ask are one decision, not forty rows."""
    first: dict[tuple, int] = {}
    out: list[QueueRow] = []
    for row in rows:
        key = _sameness(row)
        if key in first:
            at = first[key]
            out[at] = replace(out[at], also=(*out[at].also, row.request.pk))
        else:
            first[key] = len(out)
            out.append(row)
    return out


def queue_rows(
    requests: list[CapacityRequest], *, free: dict[int, int], now: datetime
) -> list[QueueRow]:
    rows = []
    for r in requests:
        per_hour, total, per_month = Decimal(0), Decimal(0) if r.ends_at else None, Decimal(0)
        items = []
        for item in r.items.all():
            rc = item.resource_class
            cost = cost_estimate(
                price_per_hour=rc.price_per_hour,
                amount=item.amount,
                starts_at=max(r.starts_at, now),
                ends_at=r.ends_at,
            )
            per_hour += cost.per_hour
            per_month += cost.per_month
            if total is not None:
                total += cost.total or 0
            items.append((item.amount, rc, free.get(rc.pk, 0)))
        rows.append(QueueRow(r, now - r.created_at, per_hour, total, items, per_month=per_month))
    return rows


def sort_rows(rows: list[QueueRow], sort: str) -> list[QueueRow]:
    if sort == "newest":
        return sorted(rows, key=lambda row: row.age)
    if sort == "cost":  # what it costs to the end; an open-ended ask counts a month
        return sorted(rows, key=lambda row: -(row.total or row.per_hour * 730))
    if sort == "team":
        return sorted(rows, key=lambda row: (row.request.tenant.slug, -row.age))
    return sorted(rows, key=lambda row: -row.age)


def pending_asks(filters: QueueFilters, now: datetime):
    """Pending asks of teams that are not archived, narrowed by `filters`."""
    pending = (
        CapacityRequest.objects.filter(state=CapacityRequest.State.SUBMITTED)
        .exclude(tenant__status=Tenant.Status.ARCHIVED)
        .select_related("tenant", "requester")
        .prefetch_related("items__resource_class")
    )
    if filters.tenant:
        pending = pending.filter(tenant__slug=filters.tenant)
    if filters.resource_class:
        pending = pending.filter(items__resource_class__slug=filters.resource_class).distinct()
    if filters.min_age_days:
        pending = pending.filter(created_at__lte=now - timedelta(days=filters.min_age_days))
    return pending


@platform_admin_required
def queue(request):
    return queue_page(request)


def queue_page(request, *, status=200, selected=(), comment="", comment_error="", row_errors=None):
    now = timezone.now()
    filters = QueueFilters.from_query(request.GET)
    pools = pool_summary()
    free = {line.resource_class.pk: line.free for line in pools}
    asks = list(pending_asks(filters, now))
    rows = group_rows(sort_rows(queue_rows(asks, free=free, now=now), filters.sort))
    query = request.GET.copy()
    query.pop("page", None)
    page = Paginator(rows, PER_PAGE).get_page(request.GET.get("page"))
    errors, names = row_errors or {}, display.class_names()
    # the shown rows' teams' budgets, in one batch (not a query per row)
    budgets = budgets_left({row.request.tenant_id for row in page.object_list}, now)
    page.object_list = [  # the shown rows only: reasons are read for one page, not the queue
        replace(
            row,
            error=errors.get(row.request.pk, ""),
            reasons=tuple(display.readable_all(row.request.policy_reasons or [], names)),
            budget=budgets.get(row.request.tenant_id),
        )
        for row in page.object_list
    ]
    waiting = pending_asks(QueueFilters(), now)  # unfiltered: what the filters offer
    context = {
        "page": page,
        "now": now,  # an ask that starts later is a booking: its start is shown
        "waiting_count": len(asks),  # asks, not rows: identical ones share a row
        "filters": filters,
        "filtered": filters != QueueFilters(),
        "tenants": Tenant.objects.filter(capacity_requests__in=waiting).distinct().order_by("slug"),
        "classes": ResourceClass.objects.filter(
            pk__in=CapacityRequestItem.objects.filter(request__in=waiting).values(
                "resource_class_id"
            )
        ).order_by("gpu_model", "kind", "profile"),
        "age_choices": AGE_CHOICES,
        "sort_choices": SORT_CHOICES,
        "selected": {str(pk) for pk in selected},
        "comment": comment,
        "comment_error": comment_error,
        "query": query.urlencode(),
        "shortfalls": [line for line in pools if line.shortfall],
    }
    return render(request, "console/queue.html", context, status=status)


def _back_to_queue(request):
    query = request.POST.get("query", "")
    return redirect(reverse("console:queue") + (f"?{query}" if query else ""))


@platform_admin_required
@require_POST
def decide(request):
    """Approve or reject one request with its own note (a row's button, or the request's page),
    or a selection with one comment."""
    one = _ONE.fullmatch(request.POST.get("one", ""))
    if one:
        return _decide_one(request, one.group(1), int(one.group(2)))
    many = _MANY.fullmatch(request.POST.get("one", ""))
    if many:
        return _decide_group(request, many.group(1), many.group(2).split(","))
    action = request.POST.get("action")
    comment = request.POST.get("comment", "").strip()
    ids = request.POST.getlist("request")
    for group in request.POST.getlist("group"):  # a grouped row's checkbox: all its asks
        ids.extend(group.split(","))
    if action not in ("approve", "reject") or not ids:
        messages.error(request, "Select at least one request, then approve or reject.")
        return _back_to_queue(request)
    if not all(_REQUEST_ID.fullmatch(i) for i in ids):
        # only a tampered form sends these: decide nothing, show the queue again
        messages.error(request, "Request ids are whole numbers. Select requests from the list.")
        return queue_page(request, status=400)
    done, comment_error = 0, ""
    for req in CapacityRequest.objects.filter(pk__in=ids).select_related("tenant").order_by("pk"):
        try:
            _apply(request.user, action, req, comment)
            done += 1
        except ServiceError as exc:
            if exc.field == "comment":
                comment_error = exc.detail
            else:
                messages.error(request, f"#{req.pk} ({req.tenant.slug}): {exc.detail}")
    if done:
        verb = "Approved" if action == "approve" else "Rejected"
        messages.success(request, f"{verb} {done} request{'s' if done != 1 else ''}.")
    if comment_error:  # the selection and the comment stay, the error sits at the comment
        return queue_page(
            request, status=400, selected=ids, comment=comment, comment_error=comment_error
        )
    return _back_to_queue(request)


def _decide_group(request, action: str, ids: list[str]):
    """A grouped row's button: its identical asks with the row's one note."""
    first = int(ids[0])
    note = request.POST.get(f"note-{first}", "").strip()
    done, refused = 0, defaultdict(list)  # one message per reason, not one per copy
    for req in CapacityRequest.objects.filter(pk__in=ids).select_related("tenant").order_by("pk"):
        try:
            _apply(request.user, action, req, note)
            done += 1
        except ServiceError as exc:
            if exc.field == "comment":
                return queue_page(request, status=400, row_errors={first: exc.detail})
            refused[(req.tenant.slug, exc.detail)].append(req.pk)
    for (slug, detail), pks in refused.items():
        which = f"#{pks[0]}" if len(pks) == 1 else f"{len(pks)} asks (#{pks[0]}–#{pks[-1]})"
        messages.error(request, f"{which} ({slug}): {detail}")
    if done:
        verb = "Approved" if action == "approve" else "Rejected"
        messages.success(request, f"{verb} {done} identical request{'s' if done != 1 else ''}.")
    return _back_to_queue(request)


def _apply(actor, action: str, req: CapacityRequest, comment: str) -> None:
    if action == "approve":
        approval_services.approve_capacity_request(actor=actor, request=req, comment=comment)
    else:
        request_services.reject_capacity_request(actor=actor, request=req, comment=comment)


def _decide_one(request, action: str, pk: int):
    from_detail = request.POST.get("back") == "request"
    req = CapacityRequest.objects.filter(pk=pk).select_related("tenant").first()
    if req is None:
        messages.error(request, f"No request #{pk}.")
        return _back_to_queue(request)
    note = request.POST.get(f"note-{pk}", "").strip()
    try:
        _apply(request.user, action, req, note)
    except ServiceError as exc:
        if from_detail:
            messages.error(request, f"#{pk}: {exc.detail}")
            return redirect("tenants:request_detail", pk=pk)
        if exc.field == "comment":
            return queue_page(request, status=400, row_errors={pk: exc.detail})
        messages.error(request, f"#{pk} ({req.tenant.slug}): {exc.detail}")
    else:
        verb = "Approved" if action == "approve" else "Rejected"
        messages.success(request, f"{verb} request #{pk} of {req.tenant.name}.")
    if from_detail:
        return redirect("tenants:request_detail", pk=pk)
    return _back_to_queue(request)
