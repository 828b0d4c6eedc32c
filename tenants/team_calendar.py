"""The team's capacity calendar page: its own grants and bookings against each pool, day by
day over the coming weeks (the numbers are `tenants.calendars`', as the API's)."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from tenants import calendars
from tenants.models import Tenant


def grace_minutes() -> int:
    """The over-quota grace as the calendar pages say it, in whole minutes."""
    return max(0, settings.OVER_QUOTA_GRACE_S) // 60


@login_required
def team_calendar(request, slug):
    tenant = get_object_or_404(Tenant.objects.visible_to(request.user), slug=slug)
    return render(
        request,
        "tenants/team_calendar.html",
        {
            "tenant": tenant,
            "calendars": calendars.class_calendars(calendars.team_classes(tenant), tenant=tenant),
            "mode": "team",
            "over_quota_grace_min": grace_minutes(),
        },
    )
