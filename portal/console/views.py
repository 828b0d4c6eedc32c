"""The platform console: pages for platform admins. Same services as the admin and the API."""

from collections import defaultdict

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Q
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core import bounds
from core.errors import ServiceError
from core.permissions import platform_admin_required
from core.tasks import send_hint
from portal import borrowing, queue_board
from portal.console.capacity_map import (
    capacity_map_data,
    draw_nodes,
    group_by_cluster,
    held_by_node,
    mark_health,
    mark_places,
    mark_reshapes,
)
from scheduler.cluster import node_offers
from scheduler.cluster.models import Cluster, Node, ReconcileRun, TenantSyncState
from scheduler.cluster.tasks import reconcile_all
from scheduler.mig import configs as mig_configs
from scheduler.mig import layouts, orders, planner, proposals, rollout
from scheduler.mig.models import Plan
from tenants.filtersets import AuditEventFilter
from tenants.models import AuditEvent, CapacityRequest, Tenant
from tenants.selectors import effective_quotas, pool_summary


@platform_admin_required
def capacity(request):
    nodes, colours = capacity_map_data()
    mark_health(nodes)
    mark_reshapes(nodes)
    mark_places(nodes)
    groups = group_by_cluster(nodes)
    taint_keys = {t["key"] for t in settings.GPU_NODE_TOLERATIONS if t.get("key")}
    pools = pool_summary()
    return render(
        request,
        "console/capacity.html",
        {
            "pools": pools,
            "shortfalls": [line for line in pools if line.shortfall],
            "nodes": nodes,
            # in a fleet, the map by cluster (a single-cluster install's shows as ever)
            "groups": groups if len(groups) > 1 else [],
            "colours": colours,
            "cluster": Cluster.objects.first(),
            "unguarded": node_offers.unguarded_gpu_nodes(list(Node.objects.all()), taint_keys),
            "toolkit_label": node_offers.TOOLKIT_LABEL,
        },
    )


ANY_STATUS = "any"  # the tenants list's filter: archived teams too


@platform_admin_required
def tenants_overview(request):
    search = request.GET.get("q", "").strip()[:80]
    status = request.GET.get("status", "")
    found = Tenant.objects.select_related("sync_state").order_by("status", "slug")
    if search and not bounds.storable(search):
        found = found.none()  # no slug or name holds a NUL
    elif search:
        found = found.filter(Q(slug__icontains=search) | Q(name__icontains=search))
    if status in Tenant.Status.values:
        found = found.filter(status=status)
    elif status != ANY_STATUS:
        # an archived team holds nothing and asks nothing (the queue leaves its asks out): the
        # list of teams that count leaves it out too, unless asked for (issue 49, 9)
        found = found.exclude(status=Tenant.Status.ARCHIVED)
    tenants = list(found)
    hidden = 0 if status else Tenant.objects.filter(status=Tenant.Status.ARCHIVED).count()
    quotas = effective_quotas([t.pk for t in tenants])
    lines = {line.resource_class.pk: line.resource_class for line in pool_summary()}
    gpu_eq = defaultdict(float)
    for tenant_id, per_class in quotas.items():
        for rc_id, units in per_class.items():
            if rc_id in lines:
                gpu_eq[tenant_id] += float(lines[rc_id].gpu_fraction) * units
    pending = defaultdict(int)
    for tenant_id in (
        CapacityRequest.objects.filter(state=CapacityRequest.State.SUBMITTED)
        .exclude(tenant__status=Tenant.Status.ARCHIVED)  # as the approval queue counts them
        .values_list("tenant_id", flat=True)
    ):
        pending[tenant_id] += 1
    rows = [
        {
            "tenant": t,
            "gpu_eq": gpu_eq[t.pk],
            "pending": pending[t.pk],
            "archived": t.status == Tenant.Status.ARCHIVED,  # holds and asks nothing: no counts
            "sync": getattr(t, "sync_state", None),
        }
        for t in tenants
    ]
    return render(
        request,
        "console/tenants.html",
        {
            "rows": rows,
            "q": search,
            "status": status,
            "statuses": [*Tenant.Status.choices, (ANY_STATUS, "Any status, archived included")],
            "archived_hidden": hidden,
        },
    )


@platform_admin_required
def queues(request):
    """Every team's Kueue queue as last read: own, used, borrowed and lent, waiting, admitted;
    summed up over every team, one page of teams listed (queue_board)."""
    search = request.GET.get("q", "")[:80]
    show = request.GET.get("show", "")
    board = queue_board.read_board(search=search, show=show, page=request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "console/queues.html",
        {
            "board": board,
            # borrowed and lent side by side, and each lender's line says to whom (issue 35, 8)
            "cohort": borrowing.cohort_lines(board.cohort),
            "q": search.strip(),
            "show": show if show in queue_board.SHOWS else "",
            "shows": [(key, label, board.counts[key]) for key, label in queue_board.SHOWS.items()],
            "query": query.urlencode(),
        },
    )


@platform_admin_required
def health(request):
    return render(
        request,
        "console/health.html",
        {
            "failing": TenantSyncState.objects.exclude(status=TenantSyncState.Status.IN_SYNC)
            .select_related("tenant")
            .order_by("status", "tenant__slug"),
            "runs": ReconcileRun.objects.select_related("tenant").exclude(drift=[], error="")[:30],
            "clusters": Cluster.objects.all(),
            "in_sync": TenantSyncState.objects.filter(
                status=TenantSyncState.Status.IN_SYNC
            ).count(),
        },
    )


# The audit filters in words (the FilterSet's generated labels read "Actor repr contains").
AUDIT_LABELS = {
    "verb": "Action contains",
    "actor": "Who (name contains)",
    "tenant": "Team",
    "object_type": "Object type",
    "object_id": "Object id",
    "request_id": "Request id",
    "since": "From (UTC)",
    "until": "Before (UTC)",
}


@platform_admin_required
@require_POST
def reconcile_now(request):
    """Compare every tenant with the cluster now, not at the next periodic run (a hint: the
    periodic run does the same, so a lost message costs only time)."""
    send_hint(reconcile_all, "the reconcile asked for from the console")
    messages.success(request, "Reconcile queued: every tenant is compared with the cluster now.")
    return redirect("console:health")


@platform_admin_required
def audit(request):
    events = AuditEventFilter(
        request.GET,
        queryset=AuditEvent.objects.select_related("tenant").order_by("-created_at", "-id"),
    )
    for name, label in AUDIT_LABELS.items():
        events.form.fields[name].label = label
    for name in ("since", "until"):  # a date-time picker, not free text
        events.form.fields[name].widget = forms.DateTimeInput(
            attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"
        )
    page = Paginator(events.qs, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request, "console/audit.html", {"filter": events, "page": page, "query": query.urlencode()}
    )


# --- MIG planning (issue 8) ---------------------------------------------------------------------


def _plan_drawings(plan: Plan) -> list[dict]:
    """Per node of the plan: today's and the proposed layout as capacity-map drawings."""
    held = held_by_node()
    nodes = {n.name: n for n in Node.objects.filter(name__in=[e["node"] for e in plan.nodes])}
    today: list[tuple[object, list[layouts.GpuDrawing]]] = []
    proposed: list[tuple[object, list[layouts.GpuDrawing]]] = []
    for entry in plan.nodes:
        node = nodes.get(entry["node"])
        for shapes, out in (("current", today), ("proposed", proposed)):
            gpus = _gpus_of(entry["model"], [proposals.shape_from_json(s) for s in entry[shapes]])
            out.append(
                (node or entry["node"], layouts.assign_tenants(gpus, held.get(entry["node"], {})))
            )
    colours = layouts.tenant_colours(
        [b.tenant for _, gpus in today for g in gpus for b in g.blocks if b.tenant]
    )
    drawn_today, _ = draw_nodes(today, colours)
    drawn_proposed, _ = draw_nodes(proposed, colours)
    return [
        {"entry": entry, "today": t, "proposed": p}
        for entry, t, p in zip(plan.nodes, drawn_today, drawn_proposed, strict=True)
    ]


def _gpus_of(model: str, shapes: list[planner.Shape]) -> list[layouts.Gpu]:
    """Draw shapes with the capacity map's own reading of a mig-parted config."""
    replicas = [s.replicas if s.mode == "shared" else 1 for s in shapes]
    config = {"proposed": mig_configs.mig_entries(shapes)}
    return layouts.gpu_layouts(model, len(shapes), "proposed", replicas, config)


@platform_admin_required
def plan_list(request):
    return render(
        request,
        "console/plan_list.html",
        {
            "plans": Plan.objects.select_related("created_by")[:20],
            "nodes": Node.objects.exclude(gpu_model="").order_by("name"),
        },
    )


@platform_admin_required
@require_POST
def plan_create(request):
    nodes = request.POST.getlist("node") or None
    try:
        weight = float(request.POST.get("large_shape_weight") or 0)
    except ValueError:  # not 0 in its place: a plan the admin did not ask for
        messages.error(request, "No plan: the large-shape weight must be a number ≥ 0, e.g. 0.5")
        return redirect("console:plan_list")
    try:
        plan = proposals.create_plan(
            actor=request.user,
            allow_draining=request.POST.get("allow_draining") == "on",
            include_pending=request.POST.get("include_pending") == "on",
            nodes=nodes,
            large_shape_weight=weight,
            # as sent: the service names what it takes, rather than the view guessing
            sharing=request.POST.get("sharing", "time-slicing"),
            method=request.POST.get("method", "exact"),
        )
    except ServiceError as exc:
        messages.error(request, f"No plan: {exc.detail}")
        return redirect("console:plan_list")
    except RuntimeError as exc:  # the solver gave up: say so, keep the page
        messages.error(request, f"No plan: {exc}")
        return redirect("console:plan_list")
    return redirect("console:plan_detail", pk=plan.pk)


@platform_admin_required
def plan_detail(request, pk):
    plan = get_object_or_404(Plan, pk=pk)
    summary = plan.summary
    classes = sorted(
        set(summary.get("demand", {}))
        | set(summary.get("supply_before", {}))
        | set(summary.get("supply_after", {}))
    )
    lines = [
        {
            "slug": c,
            "demand": summary.get("demand", {}).get(c, 0),
            "before": summary.get("supply_before", {}).get(c, 0),
            "after": summary.get("supply_after", {}).get(c, 0),
            "served": summary.get("served", {}).get(c, 0),
            "unserved": summary.get("unserved", {}).get(c, 0),
        }
        for c in classes
    ]
    return render(
        request,
        "console/plan_detail.html",
        {
            "plan": plan,
            "stuck": rollout.is_stuck(plan),
            "lines": lines,
            "drawings": _plan_drawings(plan),
        },
    )


@platform_admin_required
@require_POST
def plan_apply(request, pk):
    """Queue the rollout of all changed nodes, or of the one node posted."""
    plan = get_object_or_404(Plan, pk=pk)
    nodes = request.POST.getlist("node") or None
    try:
        orders.request_plan_apply(actor=request.user, plan=plan, nodes=nodes)
    except ServiceError as exc:
        messages.error(request, exc.detail)
        return redirect("console:plan_detail", pk=plan.pk)
    what = ", ".join(nodes) if nodes else "every changed node"
    messages.success(request, f"Rollout queued for {what}; this page shows each step.")
    return redirect("console:plan_detail", pk=plan.pk)


@platform_admin_required
@require_POST
def plan_abandon(request, pk):
    """Stop a rollout in progress (or stuck): no further node starts."""
    plan = get_object_or_404(Plan, pk=pk)
    try:
        orders.abandon_plan(actor=request.user, plan=plan)
    except ServiceError as exc:
        messages.error(request, exc.detail)
        return redirect("console:plan_detail", pk=plan.pk)
    messages.success(request, "Rollout abandoned: the node in progress finishes its step.")
    return redirect("console:plan_detail", pk=plan.pk)
