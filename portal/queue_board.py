"""The console's Queues page (issue 55): every team's stored queue summary read in one query,
summed up and filtered over all of them, and one page of teams shown. A thousand teams' queue
cards on one page took seconds to render and weighed 0.7 MB; the sums, the filter counts and
the cohort's borrowing are still over every team, so a page of 50 says what the whole did.
Teams are those the page always listed: every team not archived, by slug."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.paginator import Page, Paginator

from portal.borrowing import Lending, with_lent_to
from scheduler.cluster.queues import lending
from tenants.models import Tenant

PER_PAGE = 50

# ?show= on the page: which teams' queues are listed (the sums above cover them all)
SHOWS = {
    "": "Every team",
    "waiting": "With work waiting",
    "borrowing": "Borrowing",
    "lending": "Lending",
    "not_admitting": "Not admitting",
    "unread": "Not read from the cluster yet",
}


@dataclass(frozen=True)
class TeamQueue:
    slug: str
    name: str
    queue: dict  # the stored summary (with each line's `lent_to` once on a page); {} unread


def shown(queue: dict, show: str) -> bool:
    """Whether a team's stored queue summary is listed under `show` (a key of SHOWS)."""
    if show == "unread":
        return not queue
    if not queue:
        return show == ""
    lines = queue.get("lines") or []
    return {
        "": True,
        "waiting": bool(queue.get("pending")),
        "borrowing": any(line.get("borrowed") for line in lines),
        "lending": any(line.get("lent") for line in lines),
        "not_admitting": not queue.get("active"),
    }.get(show, True)


def _found(team: TeamQueue, search: str) -> bool:
    return not search or search in team.slug.lower() or search in team.name.lower()


@dataclass(frozen=True)
class QueueBoard:
    teams: int  # every team the page is about (not archived)
    counts: dict[str, int]  # per SHOWS key, how many teams it lists (search aside)
    waiting: int  # workloads waiting in every team's queue, as Kueue last counted
    admitted: int
    cohort: Lending  # over every team: a lender's line names borrowers on any page
    listed: int  # teams that the search and filter keep
    page: Page


def read_board(*, search: str = "", show: str = "", page: str | int | None = 1) -> QueueBoard:
    """Every team's queue summed up, and the page `page` of those that `show` and `search`
    (in slug or name, any case) keep, each line with whom it lends to. One query."""
    rows = (
        Tenant.objects.exclude(status=Tenant.Status.ARCHIVED)
        .order_by("slug")
        .values_list("slug", "name", "sync_state__queue_status")
    )
    teams = [TeamQueue(slug, name, queue or {}) for slug, name, queue in rows]
    show = show if show in SHOWS else ""
    search = search.strip().lower()
    kept = [t for t in teams if shown(t.queue, show) and _found(t, search)]
    cohort = lending({t.slug: t.queue for t in teams if t.queue})
    one_page = Paginator(kept, PER_PAGE).get_page(page)
    one_page.object_list = [
        TeamQueue(t.slug, t.name, with_lent_to(t.queue, cohort) if t.queue else {})
        for t in one_page.object_list
    ]
    return QueueBoard(
        teams=len(teams),
        counts={key: sum(shown(t.queue, key) for t in teams) for key in SHOWS},
        waiting=sum(int(t.queue.get("pending") or 0) for t in teams),
        admitted=sum(int(t.queue.get("admitted") or 0) for t in teams),
        cohort=cohort,
        listed=len(kept),
        page=one_page,
    )
