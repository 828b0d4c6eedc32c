"""The console's GPU health page: each node's state, the events signals opened and the pods
they hit, the acknowledgement that takes a node back, and the policy's rules."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.errors import ServiceError
from core.permissions import platform_admin_required
from core.tasks import send_hint
from scheduler.health import events as health_events
from scheduler.health import rules as health_rules
from scheduler.health.models import HealthEvent, HealthRule, NodeHealth
from scheduler.health.tasks import enforce_gpu_health


class HealthRuleForm(forms.ModelForm):
    class Meta:
        model = HealthRule
        fields = list(health_rules.RULE_FIELDS)


def _page(request, *, form=None, editing=None, status=200):
    health_rules.ensure_default_rules()
    open_events = list(
        HealthEvent.objects.open().prefetch_related("impacts__tenant", "impacts__workload")
    )
    context = {
        "nodes": NodeHealth.objects.exclude(state=NodeHealth.State.HEALTHY)
        .order_by("state", "node_name")
        .all(),
        "healthy": NodeHealth.objects.filter(state=NodeHealth.State.HEALTHY).count(),
        "open_events": open_events,
        "closed_events": HealthEvent.objects.filter(closed_at__isnull=False)
        .select_related("closed_by")
        .prefetch_related("impacts")[:30],
        "rules": HealthRule.objects.all(),
        "form": form or HealthRuleForm(instance=editing),
        "editing": editing,
        "configured": bool(settings.PROMETHEUS_URL),
    }
    return render(request, "console/gpu_health.html", context, status=status)


@platform_admin_required
def gpu_health(request):
    wanted = request.GET.get("edit", "")
    editing = HealthRule.objects.filter(pk=int(wanted)).first() if wanted.isdigit() else None
    return _page(request, editing=editing)


@platform_admin_required
@require_POST
def gpu_health_ack(request, node):
    """Take the node back: its open events close and the taint goes."""
    try:
        closed = health_events.acknowledge_node(actor=request.user, node_name=node)
    except ServiceError as exc:
        messages.error(request, exc.detail)
        return redirect("console:gpu_health")
    transaction.on_commit(
        lambda: send_hint(enforce_gpu_health, f"removing the health taint of {node}")
    )
    messages.success(
        request,
        f"Node {node} acknowledged: {closed} event{'s' if closed != 1 else ''} closed; its "
        "taint is removed now and its capacity returns to the pools.",
    )
    return redirect("console:gpu_health")


@platform_admin_required
@require_POST
def gpu_health_rule(request, pk=None):
    """Create a rule, or change one."""
    rule = get_object_or_404(HealthRule, pk=pk) if pk is not None else None
    form = HealthRuleForm(request.POST, instance=rule)
    if not form.is_valid():
        return _page(request, form=form, editing=rule, status=400)
    values = {f: form.cleaned_data.get(f) for f in health_rules.RULE_FIELDS}
    try:
        saved = health_rules.save_rule(actor=request.user, values=values, rule=rule)
    except ServiceError as exc:
        form.add_error(None, exc.detail)
        return _page(request, form=form, editing=rule, status=400)
    messages.success(request, f"Rule saved: {saved}.")
    return redirect("console:gpu_health")
