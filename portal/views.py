from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import render

from tenants.models import Tenant
from tenants.selectors import effective_quotas, pool_summary


@login_required
def home(request):
    tenants = list(Tenant.objects.visible_to(request.user).exclude(status=Tenant.Status.ARCHIVED))
    quotas = effective_quotas([t.pk for t in tenants])
    lines = pool_summary()
    by_id = {line.resource_class.pk: line for line in lines}
    teams = [
        {
            "tenant": t,
            "quota": [
                (by_id[rc_id].resource_class, n)
                for rc_id, n in sorted(quotas[t.pk].items())
                if rc_id in by_id
            ],
        }
        for t in tenants
    ]
    return render(request, "portal/home.html", {"teams": teams, "pools": lines})


def healthz(request):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
