"""Workloads in the browser: list, detail with history and logs, submit, cancel. The same
services as the API; objects only through `visible_to(user)`."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.errors import ClusterError, ServiceError
from scheduler.cluster import kube
from scheduler.workloads import services as workloads
from scheduler.workloads import sync as workload_sync
from scheduler.workloads.filtersets import WorkloadFilter
from scheduler.workloads.forms import WorkloadForm
from scheduler.workloads.models import Workload
from scheduler.workloads.selectors import can_read_env_values, env_shown
from tenants.models import Tenant
from tenants.permissions import can_ask


def _tenant(request, slug):
    return get_object_or_404(Tenant.objects.visible_to(request.user), slug=slug)


@login_required
def workload_list(request, slug):
    tenant = _tenant(request, slug)
    filtered = WorkloadFilter(
        request.GET, queryset=Workload.objects.filter(tenant=tenant).select_related("submitted_by")
    )
    page = Paginator(filtered.qs, 25).get_page(request.GET.get("page"))
    return render(
        request,
        "scheduler/workload_list.html",
        {
            "tenant": tenant,
            "filter": filtered,
            "page": page,
            "can_submit": tenant.is_active and can_ask(request.user, tenant),
        },
    )


@login_required
def workload_detail(request, pk):
    workload = get_object_or_404(
        Workload.objects.visible_to(request.user).select_related("tenant", "submitted_by"), pk=pk
    )
    env_values = can_read_env_values(request.user, workload.tenant)
    return render(
        request,
        "scheduler/workload_detail.html",
        {
            "w": workload,
            "events": workload.events.all(),
            "can_cancel": not workload.is_final and can_ask(request.user, workload.tenant),
            "env": sorted(env_shown(workload.env or {}, values=env_values).items()),
            "env_values": env_values,
            "sizes": [
                f"{value} {what}"
                for value, what in (
                    (workload.cpu, "CPU"),
                    (workload.memory, "memory"),
                    (workload.ephemeral_storage, "ephemeral storage"),
                    (workload.shm, "shared memory"),
                )
                if value
            ],
        },
    )


@login_required
def workload_logs(request, pk):
    """The logs panel (htmx): the newest pod's log, or why there is none."""
    workload = get_object_or_404(Workload.objects.visible_to(request.user), pk=pk)
    context = {"w": workload}
    try:
        context["pod"], context["log"] = workload_sync.workload_logs(
            kube.gateway(), actor=request.user, workload=workload
        )
    except ServiceError as exc:
        context["unavailable"] = exc.detail
    except ClusterError as exc:
        context["unavailable"] = f"the cluster did not answer: {exc}"
    return render(request, "scheduler/_workload_logs.html", context)


@login_required
def workload_create(request, slug):
    tenant = _tenant(request, slug)
    form = WorkloadForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            workload = workloads.submit_workload(
                actor=request.user,
                tenant=tenant,
                name=d["name"],
                kind=d["kind"],
                image=d["image"],
                command=d["command"],
                env=d["env"],
                resources={d["resource_class"].slug: d["units"]},
                priority=d["priority"],
                replicas=d["replicas"],
                backoff_limit=d["backoff_limit"],
                autoscaling=form.autoscaling(),
                **{name: d[name] for name in workloads.POD_SPEC_FIELDS},
            )
        except ServiceError as exc:
            field = {
                "resources": "resource_class",
                "priority_class": "priority",
                "autoscaling": "max_replicas",
            }.get(exc.field or "", exc.field)
            form.add_error(field if field in form.fields else None, exc.detail)
        else:
            messages.success(request, f"{workload.name} submitted: it is {workload.state}.")
            return redirect("scheduler:workload_detail", pk=workload.pk)
    return render(request, "scheduler/workload_form.html", {"tenant": tenant, "form": form})


@login_required
@require_POST
def workload_cancel(request, pk):
    workload = get_object_or_404(Workload.objects.visible_to(request.user), pk=pk)
    try:
        workloads.cancel_workload(actor=request.user, workload=workload)
        messages.success(request, f"{workload.name} cancelled.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect("scheduler:workload_detail", pk=pk)
