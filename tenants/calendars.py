"""The capacity calendar (issue 52): for each resource class, day by day over the coming
weeks, the units free, granted (in force) and booked (starting later), read for the ask form,
the team's calendar, the platform console and the API alike, so they cannot disagree. The
arithmetic is `tenants.capacity_time.calendar`; this module reads the grants (and, for the
console, the asks waiting for approval) that overlap the weeks shown."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from catalog.models import Pool, ResourceClass
from tenants import capacity_time
from tenants.capacity_time import Hold, Window
from tenants.models import CapacityRequest, CapacityRequestItem, QuotaGrant, Tenant

DAY = timedelta(days=1)
WEEKS = 8  # what the pages show; the API takes 1 to MAX_WEEKS
MAX_WEEKS = 26


@dataclass(frozen=True)
class Day:
    starts_at: datetime
    free: int  # free at the day's busiest instant: free all day
    granted: int  # held by grants in force now
    booked: int  # held by grants that start later
    holders: tuple[str, ...] = ()  # the teams holding units that day (the console only)
    own: int = 0  # of those, the team's own (the team's calendar only)
    waiting: int = 0  # asked for in asks waiting for approval (the console only)


@dataclass(frozen=True)
class ClassCalendar:
    resource_class: ResourceClass
    limit: int  # capacity × overcommit: what may be granted at any instant
    days: list[Day]
    open_ended: list[str]  # "team-a: 4 (#12)", open-ended grants holding from their start on

    @property
    def weeks(self) -> list[list[Day]]:
        return [self.days[i : i + 7] for i in range(0, len(self.days), 7)]

    def as_series(self) -> dict:
        """The API's shape of the same numbers."""
        return {
            "resource_class": self.resource_class.slug,
            "grantable": self.limit,
            "open_ended": self.open_ended,
            "days": [
                {
                    "date": d.starts_at.date().isoformat(),
                    "starts_at": d.starts_at.isoformat(),
                    "free": d.free,
                    "granted": d.granted,
                    "booked": d.booked,
                    "own": d.own,
                    "waiting": d.waiting,
                    "teams": list(d.holders),
                }
                for d in self.days
            ],
        }


def first_day(now: datetime) -> datetime:
    """Midnight (in the portal's time zone) of the day `now` falls on."""
    local = timezone.localtime(now)
    return local.replace(hour=0, minute=0, second=0, microsecond=0)


def _grant_holds(classes: list[int], window: Window) -> list[Hold]:
    qs = QuotaGrant.objects.filter(
        resource_class_id__in=classes, state=QuotaGrant.State.ACTIVE, starts_at__lt=window.ends_at
    ).exclude(ends_at__lte=window.starts_at)
    rows = qs.order_by().values_list(
        "pk", "resource_class_id", "amount", "starts_at", "ends_at", "tenant__slug"
    )
    return [Hold(rc, n, s, e, slug, pk) for pk, rc, n, s, e, slug in rows]


def _waiting_holds(classes: list[int], window: Window, now: datetime) -> list[Hold]:
    """What the asks waiting for approval would hold, from their start (or now) on."""
    rows = (
        CapacityRequestItem.objects.filter(
            resource_class_id__in=classes,
            request__state=CapacityRequest.State.SUBMITTED,
            request__extends__isnull=True,
        )
        .exclude(request__ends_at__lte=window.starts_at)
        .order_by()
        .values_list(
            "resource_class_id",
            "amount",
            "request__starts_at",
            "request__ends_at",
            "request__tenant__slug",
        )
    )
    return [Hold(rc, n, max(s, now), e, slug) for rc, n, s, e, slug in rows]


def class_calendars(
    classes: Iterable[ResourceClass],
    *,
    now: datetime | None = None,
    weeks: int = WEEKS,
    tenant: Tenant | None = None,
    console: bool = False,
) -> list[ClassCalendar]:
    """A calendar of each class that has a pool, `weeks` from today: for a `tenant`, with
    its own units each day; for the `console`, with the teams behind each day and the
    backlog of asks waiting for approval drawn over it. Two or three queries in all."""
    now = now or timezone.now()
    start = first_day(now)
    window = Window(start, start + weeks * 7 * DAY)
    by_pk = {rc.pk: rc for rc in classes}
    pools = {
        p.resource_class_id: p.grantable for p in Pool.objects.filter(resource_class__in=by_pk)
    }
    ids = sorted(pools)
    grants = capacity_time.by_key(_grant_holds(ids, window))
    waiting = capacity_time.by_key(_waiting_holds(ids, window, now) if console else [])
    out = []
    for rc_id in sorted(ids, key=lambda i: by_pk[i].slug):
        holds = grants.get(rc_id, [])
        slots = capacity_time.calendar(
            pools[rc_id], holds, now=now, start=start, steps=weeks * 7, step=DAY
        )
        own = _levels(
            [h for h in holds if tenant is not None and h.holder == tenant.slug], start, weeks
        )
        asked = _levels(waiting.get(rc_id, []), start, weeks)
        days = [
            Day(
                s.starts_at,
                int(s.free),
                int(s.granted),
                int(s.booked),
                s.holders if console else (),
                own[i],
                asked[i],
            )
            for i, s in enumerate(slots)
        ]
        blocking = [  # the teams by name for the console only
            f"{h.holder}: {h.amount} (#{h.ref})" if console else f"{h.amount} units"
            for h in holds
            if h.ends_at is None and h.amount
        ]
        out.append(ClassCalendar(by_pk[rc_id], pools[rc_id], days, sorted(blocking)))
    return out


def _levels(holds: list[Hold], start: datetime, weeks: int) -> list[int]:
    """The most units `holds` hold at any instant of each day."""
    p = capacity_time.profile(holds)
    return [int(p.peak(start + i * DAY, start + (i + 1) * DAY)) for i in range(weeks * 7)]


def team_classes(tenant: Tenant, now: datetime | None = None) -> list[ResourceClass]:
    """The classes the team holds or has booked: its calendar's rows."""
    ids = (
        QuotaGrant.objects.holding(now or timezone.now())
        .filter(tenant=tenant)
        .values_list("resource_class_id", flat=True)
    )
    return list(ResourceClass.objects.filter(pk__in=ids))
