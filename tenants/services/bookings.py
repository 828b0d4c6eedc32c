"""The boundaries of booked grants (issue 52): the cluster follows a grant's window because the
reconcile renders only grants in force (`QuotaGrant.objects.effective`); this pass, run by beat
every few seconds, hints a reconcile of each team whose grant started or ended lately, so the
ClusterQueue changes within seconds of the boundary rather than at the next full reconcile,
and tells the team, once, that a booking started, and a day before it ends. Level-triggered:
a lost hint or a worker restart is healed by the next pass (it looks back further than its
period) and by the periodic full reconcile; running it twice is harmless."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from core import audit
from tenants.models import QuotaGrant, Tenant
from tenants.notifications import notify
from tenants.services.follow_up import notify_desired_state_changed, portal_url
from tenants.services.grants import warn_expiring_grants

# A grant whose start is this much later than its making was booked ahead: its team is told
# when it starts. (An ask approved a little after it was made starts at once, not "later".)
BOOKED_AHEAD = timedelta(minutes=5)


def booked_ahead() -> Q:
    return Q(starts_at__gt=F("created_at") + BOOKED_AHEAD)


def hint_boundaries(*, now: datetime | None = None) -> int:
    """Hint a reconcile of every team with a grant that started or ended within the look-back
    (`BOOKING_LOOKBACK_S`), tell the teams whose bookings started, and warn those whose
    bookings end within a day. Returns the number of teams hinted."""
    now = now or timezone.now()
    since = now - timedelta(seconds=settings.BOOKING_LOOKBACK_S)
    crossed = QuotaGrant.objects.filter(
        Q(starts_at__gt=since, starts_at__lte=now) | Q(ends_at__gt=since, ends_at__lte=now)
    )
    tenant_ids = set(crossed.values_list("tenant_id", flat=True))
    for tenant in Tenant.objects.filter(pk__in=tenant_ids):
        notify_desired_state_changed(tenant)  # outside a transaction: at once
    announce_started_bookings(now=now)
    warn_expiring_grants(now=now, bookings=True)
    return len(tenant_ids)


def announce_started_bookings(*, now: datetime) -> int:
    """Tell each team, once, that a grant it booked ahead is in force (audited)."""
    due = (
        QuotaGrant.objects.filter(
            booked_ahead(),
            state=QuotaGrant.State.ACTIVE,
            starts_at__lte=now,
            start_notified_at__isnull=True,
        )
        .exclude(ends_at__lte=now)
        .values_list("pk", flat=True)
    )
    told = 0
    for pk in list(due):
        with transaction.atomic():
            grant = (
                QuotaGrant.objects.select_for_update(of=("self",))
                .select_related("tenant", "resource_class")
                .get(pk=pk)
            )
            if grant.start_notified_at is not None or grant.state != QuotaGrant.State.ACTIVE:
                continue
            grant.start_notified_at = now
            grant.save(update_fields=["start_notified_at"])
            audit.record(
                actor=None,
                verb="quota_grant.started",
                obj=grant,
                tenant=grant.tenant,
                after={"starts_at": str(grant.starts_at), "ends_at": str(grant.ends_at)},
            )
            until = f"{grant.ends_at:%Y-%m-%d %H:%M %Z}" if grant.ends_at else "further notice"
            notify(
                "grant.started",
                grant.tenant,
                subject=f"[GPU Portal] {grant.tenant.slug}: a booking started",
                text=(
                    f"The booking of {grant.amount} × {grant.resource_class.slug} for "
                    f"{grant.tenant.slug} is in force until {until}: its units are in the team's "
                    f"queue. {portal_url('tenants:team_calendar', grant.tenant.slug)}"
                ),
                data={
                    "grant": grant.pk,
                    "resource_class": grant.resource_class.slug,
                    "amount": grant.amount,
                    "starts_at": grant.starts_at.isoformat(),
                    "ends_at": grant.ends_at.isoformat() if grant.ends_at else None,
                },
            )
            told += 1
    return told
