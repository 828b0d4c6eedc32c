"""The console's capacity calendar: every pool day by day over the coming weeks, with the
teams behind each day's grants and bookings and the backlog of asks waiting for approval
drawn over it (the numbers are `tenants.calendars`', as the API's)."""

from django.shortcuts import render

from catalog.models import ResourceClass
from core.permissions import platform_admin_required
from tenants import calendars
from tenants.team_calendar import grace_minutes


@platform_admin_required
def calendar(request):
    classes = ResourceClass.objects.filter(active=True, pool__isnull=False)
    return render(
        request,
        "console/calendar.html",
        {
            "calendars": calendars.class_calendars(classes, console=True),
            "mode": "console",
            "over_quota_grace_min": grace_minutes(),
        },
    )
