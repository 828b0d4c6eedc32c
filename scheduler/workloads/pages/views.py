"""Workloads in the browser: list, detail with history and logs, submit, cancel. The same
services as the API; objects only through `visible_to(user)`."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from catalog.models import ResourceClass
from catalog.run_limits import duration_words
from core.errors import ClusterError, ServiceError
from scheduler.workloads import services as workloads
from scheduler.workloads.filtersets import WorkloadFilter
from scheduler.workloads.kinds import scaling
from scheduler.workloads.lifecycle import logs as pod_logs
from scheduler.workloads.lifecycle import pods as workload_pods
from scheduler.workloads.lifecycle import suspending
from scheduler.workloads.models import Workload
from scheduler.workloads.pages import presenting
from scheduler.workloads.pages import preview as workload_preview_of
from scheduler.workloads.pages.consequences import cancel_consequences
from scheduler.workloads.pages.forms import WorkloadForm, initial_from
from scheduler.workloads.selectors import (
    can_read_env_values,
    env_shown,
    waiting_for,
    waiting_outlook,
)
from scheduler.workloads.submit import admission as submit_admission
from tenants import display, hooks
from tenants.models import Tenant
from tenants.permissions import can_ask
from tenants.views import confirm_page


def _tenant(request, slug):
    return get_object_or_404(Tenant.objects.visible_to(request.user), slug=slug)


@login_required
def workload_list(request, slug):
    tenant = _tenant(request, slug)
    filtered = WorkloadFilter(
        request.GET, queryset=Workload.objects.filter(tenant=tenant).select_related("submitted_by")
    )
    page = Paginator(filtered.qs, 25).get_page(request.GET.get("page"))
    slugs = {slug for w in page for slug in (w.resources or {})}
    names = display.class_names(slugs)
    for w in page:  # the catalog's display names, not slugs; the reason as the detail page has it
        w.gpu_labels = [(n, names.get(slug, slug)) for slug, n in (w.resources or {}).items()]
        w.note = presenting.state_note(w.get_state_display(), w.reason)
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


def live_state(workload: Workload, user) -> dict:
    """What the state block shows (and the page polls while the workload is not finished)."""
    now = timezone.now()
    span = presenting.run_time(workload.started_at, workload.finished_at, now)
    held = workload.units_held()
    classes = {rc.slug: rc for rc in ResourceClass.objects.filter(slug__in=held)}
    return {
        "w": workload,
        "live": not workload.is_final,
        "note": presenting.state_note(workload.get_state_display(), workload.reason),
        "run_time": presenting.plain_duration(span),
        # under a maximum run time, while it runs: what is left before Kueue stops it
        "time_left": duration_words(int((workload.run_ends_at - now).total_seconds()))
        if workload.run_ends_at
        else "",
        # one number for what it cost: what the team's statement bills for its pods (metering)
        "cost": hooks.workload_costs([workload.pk]).get(workload.pk),
        "cost_basis": presenting.billing_words(settings.BILLING_BASIS),
        "currency": settings.BILLING_CURRENCY,
        "gpus": [(n, classes[s].display_name if s in classes else s) for s, n in held.items()],
        "per_pod": [
            (n, classes[s].display_name if s in classes else s)
            for s, n in (workload.resources or {}).items()
        ],
        "can_cancel": not workload.is_final and can_ask(user, workload.tenant),
        "can_resume": workload.state == Workload.State.SUSPENDED and can_ask(user, workload.tenant),
        # why it waits, the same answer as the API's and the CLI's (None: it does not)
        "waiting": waiting_for(workload),
        # what it waits behind in the team's queue, and when it may start (an estimate)
        "outlook": waiting_outlook(workload, now),
        "events": workload.events.all(),
    }


@login_required
def workload_state(request, pk):
    """The state block and the history (htmx polls them every few seconds until the workload
    finishes; the history is swapped in out of band)."""
    workload = get_object_or_404(
        Workload.objects.visible_to(request.user).select_related("tenant"), pk=pk
    )
    return render(request, "scheduler/_workload_poll.html", live_state(workload, request.user))


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
            **live_state(workload, request.user),
            "command_line": presenting.command_line(workload.command, workload.shown_args),
            "can_run_again": workload.is_final and can_ask(request.user, workload.tenant),
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
        context["pod"], context["log"] = pod_logs.workload_logs(
            actor=request.user, workload=workload
        )
    except (ServiceError, ClusterError) as exc:
        detail = getattr(exc, "detail", None) or str(exc)
        context["unavailable"] = presenting.logs_unavailable_message(
            on_cluster=workload.cluster_created_at is not None,
            finished=workload.is_final,
            detail=detail,
        )
        context["detail"] = detail  # under "Details", for whoever debugs it
    return render(request, "scheduler/_workload_logs.html", context)


@login_required
def workload_pods_panel(request, pk):
    """The pods panel (htmx, polled while the workload lives): every pod with its index in a
    gang, its node and its state, or why the cluster cannot say."""
    workload = get_object_or_404(Workload.objects.visible_to(request.user), pk=pk)
    context: dict = {"w": workload}
    try:
        context["pods"] = workload_pods.workload_pod_rows(actor=request.user, workload=workload)
    except (ServiceError, ClusterError) as exc:
        context["unavailable"] = getattr(exc, "detail", None) or str(exc)
    context["simulated_pods"] = any(p.simulated for p in context.get("pods", ()))
    context["simulated"] = workload_pods.SIMULATED
    return render(request, "scheduler/_workload_pods.html", context)


@login_required
def workload_scaling_panel(request, pk):
    """The scaling panel of an autoscaled deployment (htmx, polled while it lives): replicas
    now and wanted, each metric against its target, the autoscaler's conditions and events."""
    workload = get_object_or_404(Workload.objects.visible_to(request.user), pk=pk)
    context: dict = {"w": workload}
    try:
        context["scaling"] = scaling.workload_scaling(actor=request.user, workload=workload)
    except (ServiceError, ClusterError) as exc:
        context["unavailable"] = getattr(exc, "detail", None) or str(exc)
    return render(request, "scheduler/_workload_scaling.html", context)


@login_required
def workload_create(request, slug):
    tenant = _tenant(request, slug)
    again = _workload_to_run_again(request, tenant)
    form = WorkloadForm(
        request.POST or None, tenant=tenant, initial=initial_from(again) if again else None
    )
    # every refusal in one round: the form's, the spec's (in `clean`) and admission's
    if request.method == "POST" and not _refused(form, tenant):
        try:
            assert form.spec is not None  # noqa: S101 (clean made it when nothing was refused)
            workload = workloads.submit_workload(actor=request.user, tenant=tenant, spec=form.spec)
        except ServiceError as exc:
            form.show_refusal(exc)
        else:
            # not its state: a message stays as it is while the state block below follows on
            messages.success(request, f"{workload.name} submitted.")
            return redirect("scheduler:workload_detail", pk=workload.pk)
    return render(
        request,
        "scheduler/workload_form.html",
        {"tenant": tenant, "form": form, "preview": _preview(form, tenant)},
    )


def _preview(form: WorkloadForm, tenant: Tenant) -> workload_preview_of.Preview | None:
    if not form.is_bound:
        return None
    rc = form.cleaned_data.get("resource_class") if hasattr(form, "cleaned_data") else None
    return workload_preview_of.preview(tenant, form.ask(), rc)


@login_required
def workload_preview(request, slug):
    """The form's live preview (htmx): cost, budget, and starts now / queues / never fits."""
    tenant = _tenant(request, slug)
    form = WorkloadForm(request.GET, tenant=tenant)
    form.is_valid()
    return render(request, "scheduler/_workload_preview.html", {"preview": _preview(form, tenant)})


def _refused(form: WorkloadForm, tenant: Tenant) -> bool:
    """Validate the form, then what admission would refuse of what is clean in it."""
    form.is_valid()
    form.show_refusal_list(submit_admission.check_ask(tenant, form.ask()).refused)
    return bool(form.errors)


@login_required
@require_http_methods(["GET", "POST"])
def workload_cancel(request, pk):
    workload = get_object_or_404(Workload.objects.visible_to(request.user), pk=pk)
    if request.method == "GET":
        return _cancel_confirm(request, workload)
    try:
        workloads.cancel_workload(actor=request.user, workload=workload)
        messages.success(request, f"{workload.name} cancelled.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    return redirect("scheduler:workload_detail", pk=pk)


@login_required
@require_http_methods(["POST"])
def workload_resume(request, pk):
    """Resume a workload suspended for holding idle GPUs (the API's and the CLI's service)."""
    workload = get_object_or_404(Workload.objects.visible_to(request.user), pk=pk)
    try:
        suspending.resume_workload(actor=request.user, workload=workload)
        messages.success(request, f"{workload.name} resumed: it waits for room in the queue.")
    except ServiceError as exc:
        messages.error(request, exc.detail)
    except ClusterError as exc:  # rolled back: still suspended
        messages.error(request, f"the cluster did not take the change, try again: {exc}")
    return redirect("scheduler:workload_detail", pk=pk)


def _cancel_confirm(request, workload: Workload):
    back = reverse("scheduler:workload_detail", args=[workload.pk])
    if workload.is_final or not can_ask(request.user, workload.tenant):
        messages.error(request, f"{workload.name} is {workload.get_state_display().lower()}.")
        return redirect(back)
    held = workload.units_held()
    names = display.class_names(held)
    return confirm_page(
        request,
        title=f"Cancel {workload.name}?",
        consequences=cancel_consequences(
            name=workload.name,
            kind=workload.kind,
            state=workload.state,
            pods=workload.replicas,  # a gang's every pod
            held={names.get(slug, slug): units for slug, units in held.items()},
            queue_position=workload.queue_position,
        ),
        action=request.path,
        confirm_label=f"Cancel {workload.name}",
        back_url=back,
        back_label=f"Keep {workload.name} running"
        if workload.state == Workload.State.RUNNING
        else f"Keep {workload.name}",
    )


def _workload_to_run_again(request, tenant: Tenant) -> Workload | None:
    """`?again=<id>`: a workload of this team whose settings fill the form ("run again")."""
    again = request.GET.get("again", "")
    if request.method != "GET" or not again.isascii() or not again.isdigit() or len(again) > 18:
        return None
    return Workload.objects.visible_to(request.user).filter(tenant=tenant, pk=int(again)).first()
