"""The submit form of issue 49, 5: the chosen kind's fields only (the other kind's ignored),
every refusal in one round at its own field, only what the team has quota of in the picker,
and the ask form's preview: cost per hour, starts now / queues / never fits, the budget."""

import html
from decimal import Decimal

import pytest
from django.urls import reverse

from scheduler.workloads.models import Workload
from tests.portal.test_workload_and_token_pages import granted, submit  # noqa: F401 - fixture
from tests.scheduler.factories import WorkloadFactory
from tests.tenants.factories import PoolFactory, ResourceClassFactory

pytestmark = pytest.mark.django_db


def field_errors(response, name: str) -> str:
    form = response.context["form"]
    return " ".join(form.errors.get(name, []))


def test_three_bad_fields_are_said_in_one_post_each_at_its_own_field(client, granted):  # noqa: F811
    client.force_login(granted.member)
    # a bad env line (the form's), a bad name (the spec's) and more units than the team's grant
    # and its pool can ever hold (admission's): before, three posts, and the last at the class
    response = submit(client, name="Train_7", env="no equals sign", units=30)
    assert response.status_code == 200 and not Workload.objects.exists()
    assert "line 1: write KEY=value" in field_errors(response, "env")
    assert "Train_7" in field_errors(response, "name")
    assert "can never run this" in field_errors(response, "units")
    assert not field_errors(response, "resource_class")


def test_the_other_kinds_fields_are_ignored(client, granted):  # noqa: F811
    client.force_login(granted.member)
    # a job with a deployment's fields left filled in (as a browser without CSS sends them)
    submit(client, port="not a port", replicas="0", max_replicas="3", readiness_path="/ready")
    w = Workload.objects.get()
    assert (w.kind, w.replicas, w.ports, w.max_replicas) == ("job", 1, [], None)


def test_a_deployment_ignores_the_jobs_fields(client, granted):  # noqa: F811
    client.force_login(granted.member)
    submit(client, kind="deployment", pods="zero", topology="nowhere", backoff_limit="x")
    w = Workload.objects.get()
    assert (w.kind, w.topology, w.backoff_limit) == ("deployment", "", 0)


def test_the_picker_offers_only_what_the_teams_quota_reaches(client, granted):  # noqa: F811
    whole = ResourceClassFactory(
        slug="a100-80gb", kind="whole", profile="", resource_name="nvidia.com/gpu",
        gpu_fraction=Decimal("1"), memory_gb=80, gpu_model="A100-80GB",
    )  # fmt: skip
    PoolFactory(resource_class=whole, capacity=2, borrowing_limit=0)
    other = ResourceClassFactory(slug="h100-80gb-mig-3g.40gb", gpu_model="H100-80GB")
    PoolFactory(resource_class=other, capacity=4)
    client.force_login(granted.member)
    page = client.get(reverse("scheduler:workload_create", args=["team-a"]))
    choices = {
        value: label
        for group, options in page.context["form"].fields["resource_class"].choices
        if isinstance(options, list)
        for value, label in options
    }
    assert "a100-80gb-mig-3g.40gb" in choices
    assert choices["a100-80gb-mig-3g.40gb"].endswith("2 × 3g.40gb (= 6 of 6 slices) free")
    # 2 × 3g is 6 slices: no whole A100 (7), and nothing of a model the team has no grant of
    assert "a100-80gb" not in choices and "h100-80gb-mig-3g.40gb" not in choices


def preview(client, **overrides):
    data = {
        "name": "train-7",
        "kind": "job",
        "image": "pytorch/pytorch:2.4-cuda12.4",
        "resource_class": "a100-80gb-mig-3g.40gb",
        "units": 1,
        "priority": "gpu-low",
        "pods": 1,
        **overrides,
    }
    url = reverse("scheduler:workload_preview", args=["team-a"])
    return html.unescape(" ".join(client.get(url, data).content.decode().split()))


def test_the_preview_says_cost_and_starts_now_queues_or_never_fits(client, granted):  # noqa: F811
    granted.rc.price_per_hour = Decimal("1.50")
    granted.rc.save()
    client.force_login(granted.member)
    said = preview(client)
    assert "Starts now" in said and "1.50 USD/h" in said

    WorkloadFactory(
        tenant=granted.tenant, name="big", resources={granted.rc.slug: 2},
        state=Workload.State.RUNNING, gpu_model="A100-80GB", priority_class="gpu-low",
    )  # fmt: skip
    said = preview(client)
    assert "Queues" in said and "big" in said

    said = preview(client, units=30)
    assert "Never fits as it is" in said and "45.00 USD/h" in said
