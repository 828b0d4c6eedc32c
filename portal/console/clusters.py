"""The console's clusters: the portal's own (standalone, or the manager of a fleet) and the
workers MultiKueue dispatches to, each with its last health check; a form registers a worker
and the cluster's page changes one. The service (scheduler/cluster/fleet.py) checks and audits
every change, as for the API; the kubeconfig stays in its Secret and is never shown."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render

from core.errors import ServiceError
from core.forms import RefuseNotCut
from core.permissions import platform_admin_required
from scheduler.cluster import fleet
from scheduler.cluster.models import Cluster


class ClusterForm(RefuseNotCut, forms.Form):
    """Types only; the service says what is wrong with the values."""

    role = forms.ChoiceField(choices=Cluster.Role.choices, initial=Cluster.Role.WORKER)
    region = forms.CharField(max_length=63, required=False, help_text="e.g. eu-west")
    preference = forms.IntegerField(
        initial=100, help_text="MultiKueue tries workers in this order: lower first (0-1000)"
    )
    group = forms.CharField(
        max_length=63,
        required=False,
        help_text="Workers only: grants “on any cluster of” this group may run here",
    )
    price_factor = forms.DecimalField(
        required=False,
        initial=1,
        help_text="Its GPU hours cost this many times the class's list price (above 0, at "
        "most 100; 1: the list price); empty: unchanged",
    )
    credentials_secret_namespace = forms.CharField(
        max_length=63,
        required=False,
        label="Kubeconfig Secret: namespace",
        help_text="On the manager; empty: Kueue's namespace, where MultiKueue reads it",
    )
    credentials_secret_name = forms.CharField(
        max_length=253,
        required=False,
        label="Kubeconfig Secret: name",
        help_text="Workers only: a Secret holding the worker's kubeconfig under the key "
        "“kubeconfig”, certificates embedded (no file paths, no exec, no tokenFile)",
    )


class NewClusterForm(ClusterForm):
    name = forms.CharField(
        max_length=63, help_text="A DNS label, e.g. gpu-east; it cannot change later"
    )
    field_order = ["name"]


def _fields(form: forms.Form) -> dict:
    """What the form says, less a price factor left empty (the service keeps what is)."""
    return {k: v for k, v in form.cleaned_data.items() if not (k == "price_factor" and v is None)}


def _errors_into(form: forms.Form, exc: ServiceError) -> None:
    if not exc.errors:
        form.add_error(None, exc.detail)
    for field, said in exc.errors.items():
        for message in said:
            form.add_error(field if field in form.fields else None, message)


@platform_admin_required
def cluster_list(request):
    form = NewClusterForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            cluster = fleet.register_cluster(actor=request.user, **_fields(form))
        except ServiceError as exc:
            _errors_into(form, exc)
        else:
            messages.success(
                request,
                f"Cluster {cluster.name} registered. Its health is read at the next check.",
            )
            return redirect("console:cluster_detail", name=cluster.name)
    context = {
        "clusters": Cluster.objects.order_by("archived_at", "preference", "name"),
        "form": form,
    }
    return render(request, "console/clusters.html", context, status=400 if form.errors else 200)


@platform_admin_required
def cluster_detail(request, name):
    cluster = get_object_or_404(Cluster.objects.visible_to(request.user), name=name)
    initial = {field: getattr(cluster, field) for field in fleet.EDITABLE}
    form = ClusterForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            fleet.update_cluster(actor=request.user, cluster=cluster, **_fields(form))
        except ServiceError as exc:
            _errors_into(form, exc)
        else:
            messages.success(request, f"Cluster {cluster.name} saved.")
            return redirect("console:cluster_detail", name=cluster.name)
    context = {"cluster": cluster, "form": form}
    status = 400 if form.errors else 200
    return render(request, "console/cluster_detail.html", context, status=status)
