"""Home and team dashboards (they bring tenants' and the scheduler's data together)."""

import sys
from datetime import timedelta

import kombu.exceptions
import redis.exceptions
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import InterfaceError, OperationalError, connection
from django.db.models import F, Func, IntegerField, Q, Subquery
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from catalog import slices
from core.permissions import is_platform_admin
from metering.selectors import budget_state
from portal.borrowing import team_queue
from portal.console import approvals
from portal.promises import promises
from scheduler.cluster import fleet, kube, kueue_settings
from scheduler.cluster.models import TenantSyncState
from scheduler.cluster.reconcile.specs import provider_groups_by_tenant
from scheduler.health import selectors as health_selectors
from scheduler.workloads.models import Workload
from scheduler.workloads.queue.waiting import STUCK_PENDING_REASONS
from tenants import permissions
from tenants.models import CapacityRequest, Membership, QuotaGrant, Tenant
from tenants.selectors import pool_summary, quota_lines, quota_lines_for, slice_lines
from tenants.views import member_form_for


def _bars(granted: int, in_use: int, scale: int) -> dict:
    """Widths (in %) of the quota and in-use bars of one line, against the largest quota."""
    scale = max(scale, 1)
    return {
        "granted_pct": round(100 * granted / scale),
        "in_use_pct": round(100 * in_use / scale),
        "use_pct": round(100 * in_use / granted) if granted else None,  # of the team's quota
    }


@login_required
def home(request):
    tenants = list(
        Tenant.objects.visible_to(request.user)
        .exclude(status=Tenant.Status.ARCHIVED)
        .select_related("sync_state")
    )
    quota = quota_lines_for([t.pk for t in tenants])
    teams = [
        {"tenant": t, "rows": quota[t.pk], "sync": getattr(t, "sync_state", None)} for t in tenants
    ]
    my_asks = list(
        # of the teams shown above (visible to them, not archived): a team they left is gone
        CapacityRequest.objects.filter(requester=request.user, tenant__in=[t.pk for t in tenants])
        .select_related("tenant")
        .order_by("-created_at")[:8]
    )
    return render(
        request,
        "portal/home.html",
        {
            "teams": teams,
            "pools": pool_summary(),
            "my_asks": my_asks,
            "newly_decided": newly_decided(request, my_asks),
        },
    )


@login_required
def landing(request):
    """Where signing in lands: a platform admin with asks waiting on the approval queue (the
    work waiting for them), everyone else on their teams."""
    if is_platform_admin(request.user):
        if approvals.pending_asks(approvals.QueueFilters(), timezone.now()).exists():
            return redirect("console:queue")
    return redirect("home")


ASKS_SEEN_KEY = "asks_seen_at"


def newly_decided(request, asks: list[CapacityRequest]) -> list[CapacityRequest]:
    """The person's asks decided since they last saw this page (at most a week back), from the
    asks already read: the in-app notice of a decision. The session remembers when they looked."""
    now = timezone.now()
    stored = parse_datetime(request.session.get(ASKS_SEEN_KEY) or "")
    seen_at = stored or now - timedelta(days=7)
    told = [a for a in asks if a.decided_at and a.decided_at > seen_at]
    if told or stored is None:  # the session is written only when something moved on
        request.session[ASKS_SEEN_KEY] = now.isoformat()
    return told


# The team page shows this many of a long list, and links to the whole of it (issue 35, 12).
TEAM_PAGE_CAP = 5


def _team_requests(tenant: Tenant, latest: int = 10) -> dict:
    """The oldest asks that wait for the platform team (at most TEAM_PAGE_CAP, with how many
    wait in all) and the latest decided ones; the request list has the rest."""
    submitted = CapacityRequest.State.SUBMITTED
    waiting = CapacityRequest.objects.filter(tenant=tenant, state=submitted)
    oldest = waiting.order_by("created_at", "pk").values("pk")[:TEAM_PAGE_CAP]
    decided = (
        CapacityRequest.objects.filter(tenant=tenant)
        .exclude(state=submitted)
        .order_by("-created_at")
        .values("pk")[:latest]
    )
    asks = list(
        CapacityRequest.objects.filter(Q(pk__in=oldest) | Q(pk__in=decided))
        .annotate(waiting_total=_count_of(waiting))  # in the same query
        .select_related("requester")
        .prefetch_related("items__resource_class")
        .order_by("-created_at")
    )
    return {
        "pending_requests": [r for r in reversed(asks) if r.state == submitted],
        "pending_count": asks[0].waiting_total if asks else 0,
        "requests": [r for r in asks if r.state != submitted],
    }


def _count_of(rows) -> Subquery:
    """How many `rows` there are, as a subquery a capped list's query carries along. A plain
    COUNT(*), not grouped: `GROUP BY tenant ... LIMIT 1` had PostgreSQL expect to stop early and
    scan the whole table (41 of the 59 ms of the big team's waiting list at 50,000 workloads,
    issue 55), where the filter's index finds the team's rows."""
    count = Func(F("pk"), function="COUNT", output_field=IntegerField())
    return Subquery(rows.order_by().annotate(n=count).values("n"))


def _team_waiting(tenant: Tenant) -> dict:
    """The team's workloads that wait: in its queue, or admitted but not placed (a gang short
    of pods, a pod the scheduler cannot place: Kueue counts those admitted): the first
    TEAM_PAGE_CAP, how many in all, and how many of them Kueue admitted."""
    waiting = Workload.objects.filter(tenant=tenant).filter(
        Q(state__in=[Workload.State.QUEUED, Workload.State.PREEMPTED])
        | Q(state=Workload.State.PENDING, reason__in=STUCK_PENDING_REASONS)
    )
    first = list(
        waiting.annotate(
            waiting_total=_count_of(waiting),
            unplaced_total=_count_of(waiting.filter(state=Workload.State.PENDING)),
        ).order_by(F("queue_position").asc(nulls_last=True), "created_at")[:TEAM_PAGE_CAP]
    )
    return {
        "waiting": first,
        "waiting_count": first[0].waiting_total if first else 0,
        "unplaced_count": (first[0].unplaced_total or 0) if first else 0,
    }


@login_required
def team_detail(request, slug):
    tenant = get_object_or_404(
        Tenant.objects.visible_to(request.user).select_related("robot"), slug=slug
    )
    lines = quota_lines(tenant)
    scale = max([max(line.granted, line.running) for line in lines] or [1])
    promised = promises(lines)  # quota against what the pools have (overcommit)
    memberships = list(
        Membership.objects.filter(tenant=tenant)
        .select_related("user")
        .order_by("role", "user__username")
    )
    context = {
        "tenant": tenant,
        "role": permissions.role_in(request.user, tenant),
        "can_manage": (can_manage := permissions.can_manage_members(request.user, tenant)),
        "can_ask": tenant.is_active and permissions.can_ask(request.user, tenant),
        "lines": [
            {
                "line": line,
                "promise": promised[line.resource_class.pk],
                **_bars(line.granted, line.running, scale),  # in use: what runs
            }
            for line in lines
        ],
        # grants per model in compute slices, where Kueue counts them so (GPU_QUOTA_UNIT)
        "slice_lines": slice_lines(lines) if settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES else [],
        "sync": (sync := TenantSyncState.objects.filter(tenant=tenant).first()),
        "queue": (queue := team_queue(sync.queue_status) if sync and sync.queue_status else {}),
        # the queue card lists what waits only once the queue was read from the cluster
        **(
            _team_waiting(tenant)
            if queue
            else {"waiting": [], "waiting_count": 0, "unplaced_count": 0}
        ),
        **_team_requests(tenant),
        "grants": QuotaGrant.objects.holding()
        .filter(tenant=tenant)
        .select_related("resource_class")
        .order_by("ends_at"),
        "now": timezone.now(),  # a grant that starts later is a booking
        "workloads": Workload.objects.filter(tenant=tenant).order_by("-created_at")[:10],
        "budget": budget_state(tenant),  # cost this month against budget (metering)
        # the budget is set here too (issue 49, 8) by whom metering's `can_set_budget` allows:
        # the platform team and the team's owners, those who manage members (no query more)
        "can_set_budget": can_manage,
        "enforce": settings.BUDGET_ENFORCE,
        "memberships": memberships,
        # the one owner who can sign in is offered neither leaving nor stepping down
        "last_owner_pk": _last_owner_pk(memberships),
        "roles": Membership.Role.choices,
        # groups bound in the namespace as they are: anyone in them has that role there
        "provider_groups": [
            (f"{settings.KUBE_GROUP_PREFIX}{group}", role)
            for group, role in sorted(provider_groups_by_tenant().get(tenant.slug, []))
        ],
        "member_form": member_form_for(request),
        "health_notices": health_selectors.team_notices(tenant),
    }
    return render(request, "portal/team_detail.html", context)


def _last_owner_pk(memberships: list[Membership]) -> int | None:
    owners = [m for m in memberships if m.role == Membership.Role.OWNER and m.user.is_active]
    return owners[0].pk if len(owners) == 1 else None


def healthz(request):
    """Liveness: the process answers (nothing else is asked, so a database outage does not get
    every web pod restarted)."""
    return JsonResponse({"status": "ok"})


def readyz(request):
    """Readiness: PostgreSQL, Redis (Celery's broker) and the cluster's API server all answer,
    and the cluster runs versions the portal supports; 503 with `Retry-After` and what failed
    (or what to upgrade) otherwise. A warning (a version it cannot tell) is said, not failed,
    and so is what Kueue's running Configuration lacks (`kueue_settings`, what to set): this
    pod serves as well without it, and the console that says so must stay reachable. So is
    what the last health check found wrong with a registered cluster (`clusters`)."""
    checks = {name: _probe(check) for name, check in READINESS_CHECKS.items()}
    ready = all(value == "ok" for value in checks.values())
    body: dict = {"status": "ready" if ready else "not ready", "checks": checks}
    if checks["cluster"] == "ok" and (warnings := kube.gateway().support.verdict().warnings):
        body["warnings"] = list(warnings)
    if missing := _kueue_settings_missing(cluster_ok=checks["cluster"] == "ok"):
        body["kueue_settings"] = missing
    if checks["database"] == "ok" and (problems := fleet.fleet_problems()):
        # said, not failed: a worker that is down must not take the portal's pods out of service
        body["clusters"] = problems
    response = JsonResponse(body, status=200 if ready else 503)
    if not ready:
        response["Retry-After"] = "10"
    return response


def _kueue_settings_missing(*, cluster_ok: bool) -> list[str]:
    """What Kueue's running Configuration lacks: this process's check while the cluster answers
    (read at the first probe, then every five minutes), else the last any process remembered."""
    try:
        if cluster_ok:
            verdict: dict | None = kube.gateway().kueue_settings.verdict().as_dict()
        else:
            verdict = kueue_settings.remembered()
    except Exception:  # noqa: BLE001 - an outage is the checks' to say, not this reason's
        return []
    return [missing["detail"] for missing in (verdict or {}).get("missing", [])]


def _probe(check) -> str:
    try:
        problem = check()
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready", said in the body
        return f"unavailable: {exc.__class__.__name__}"
    return f"unsupported: {problem}" if problem else "ok"


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _redis() -> None:
    import redis

    client = redis.Redis.from_url(
        settings.CELERY_BROKER_URL, socket_connect_timeout=2, socket_timeout=2
    )
    try:
        client.ping()
    finally:
        client.close()


def _cluster() -> str:
    """The API server answers, and with versions the portal supports (what to upgrade if not)."""
    gateway = kube.gateway()
    gateway.server_version()  # answers now (the verdict is read again every five minutes)
    return gateway.support.verdict().refusal


READINESS_CHECKS = {"database": _database, "redis": _redis, "cluster": _cluster}


def _unavailable(exc: BaseException | None) -> str | None:
    """What backing service an exception says is down, if it is an outage and not a bug."""
    if isinstance(exc, OperationalError | InterfaceError):
        return "the database"
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return "the cache"
    if isinstance(exc, kombu.exceptions.OperationalError):
        return "the task queue"
    return None


def server_error(request):
    """`handler500`: an outage of the database, cache or task queue is a 503 with
    `Retry-After` (a client retries with the same Idempotency-Key: nothing is done twice);
    anything else is a 500. JSON under /api/, the portal's error page elsewhere."""
    what = _unavailable(sys.exc_info()[1])
    api = request.path.startswith("/api/")
    if what:
        detail = f"{what} is unavailable for a moment; retry in a few seconds"
        status, code = 503, "unavailable"
    else:
        detail = "an unexpected error; it was logged with this request's id"
        status, code = 500, "server_error"
    if api:
        response = JsonResponse({"code": code, "detail": detail, "errors": {}}, status=status)
    else:
        page = {
            "status": status,
            "detail": detail,
            "unavailable": bool(what),
            "request_id": getattr(request, "request_id", ""),
        }
        response = HttpResponse(_error_page(request, page, with_navigation=not what), status=status)
    if status == 503:
        response["Retry-After"] = "5"
    return response


def _error_page(request, page: dict, *, with_navigation: bool) -> str:
    """The branded error page: with the navigation (which reads the signed-in user, so the
    database) after a bug, with the brand alone in an outage; a plain line if the template
    itself fails, since the error page must never raise."""
    attempts = [request, None] if with_navigation else [None]
    for with_request in attempts:
        try:
            return render_to_string("500.html", page, request=with_request)
        except Exception:  # noqa: BLE001, S112 - the next try reads less; the last is plain
            continue
    detail = page["detail"]
    return (
        f'<!doctype html><html lang="en"><title>{page["status"]}</title>'
        f"<h1>{detail[0].upper()}{detail[1:]}.</h1></html>"
    )
