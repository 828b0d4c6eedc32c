"""Choices that can be had (issue 35, 11): the ask form offers only classes a pool has, the
sharing advice names none other, the workload form offers what the team can run and links to
ask for the rest, and a refused workload never says to ask for more than the pool holds."""

import pytest
from django.urls import reverse

from catalog.advice import sharing_advice
from core.errors import QuotaExceeded
from scheduler.workloads import services as workload_services
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import CapacityRequest
from tests.tenants.factories import PoolFactory, QuotaGrantFactory, ResourceClassFactory

pytestmark = pytest.mark.django_db


def option_values(body: str, select_id: str) -> list[str]:
    start = body.index(f'id="{select_id}"')
    end = body.index("</select>", start)
    return [
        part.split('"', 1)[0]
        for part in body[start:end].split('<option value="')[1:]
        if part.split('"', 1)[0]
    ]


@pytest.fixture
def no_pool(world):
    return ResourceClassFactory(slug="a100-80gb-mig-2g.20gb", profile="2g.20gb")


def test_the_ask_form_offers_only_classes_a_pool_has(client, world, no_pool):
    empty = ResourceClassFactory(slug="a100-80gb-mig-4g.40gb", profile="4g.40gb")
    PoolFactory(resource_class=empty, capacity=0)
    client.force_login(world.member)
    body = client.get(reverse("tenants:request_create", args=["team-a"])).content.decode()
    assert option_values(body, "id_resource_class") == [str(world.rc.pk)]
    refused = client.post(
        reverse("tenants:request_create", args=["team-a"]),
        {"resource_class": no_pool.pk, "amount": 1, "justification": "x"},
    )
    assert "Select a valid choice" in refused.content.decode()
    assert not CapacityRequest.objects.exists()


def test_the_sharing_advice_never_names_a_class_no_pool_has():
    every = sharing_advice(model_key="A100-80GB", workload="inference")
    assert {a.mode for a in every} == {"mig", "time-slicing"}
    offered = sharing_advice(
        model_key="A100-80GB", workload="inference", offered={"a100-80gb-shared"}
    )
    assert [(a.mode, a.resource_class) for a in offered] == [("time-slicing", "a100-80gb-shared")]
    assert sharing_advice(model_key="A100-80GB", offered=set()) == []


def test_the_ask_hint_advises_only_what_can_be_granted(client, world):
    client.force_login(world.member)
    hint = client.get(
        reverse("tenants:request_preview", args=["team-a"]),
        {"resource_class": world.rc.pk, "amount": 1, "workload": "inference"},
    ).content.decode()
    assert "Sharing on" not in hint  # neither the 1g slice nor time-slicing has a pool here
    assert "1g.10gb" not in hint


def test_the_workload_form_offers_what_the_team_can_run_and_links_to_ask(
    client, world, no_pool, settings
):
    settings.GPU_QUOTA_UNIT = "units"
    other_model = ResourceClassFactory(slug="h100-80gb", gpu_model="H100-80GB", kind="whole")
    PoolFactory(resource_class=other_model)
    QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, amount=2)
    client.force_login(world.member)
    body = client.get(reverse("scheduler:workload_create", args=["team-a"])).content.decode()
    assert option_values(body, "id_resource_class") == [world.rc.slug]
    assert (
        f'<a href="{reverse("tenants:request_create", args=["team-a"])}">Ask for capacity</a>'
        in body
    )


def test_a_team_with_no_quota_is_told_to_ask_first(client, world):
    client.force_login(world.member)
    body = client.get(reverse("scheduler:workload_create", args=["team-a"])).content.decode()
    assert option_values(body, "id_resource_class") == []
    assert "The team has no quota yet" in body and "Ask for capacity</a>" in body


def submit(world, units: int):
    return workload_services.submit_workload(
        actor=world.member,
        tenant=world.tenant,
        spec=workload_spec(
            name="too-big",
            kind="job",
            image="busybox",
            resources={world.rc.slug: units},
            priority="gpu-low",
        ),
    )


@pytest.mark.parametrize("unit", ["units", "slices"])
def test_a_refusal_never_says_to_ask_for_more_than_the_pool_holds(world, settings, unit):
    settings.GPU_QUOTA_UNIT = unit
    QuotaGrantFactory(tenant=world.tenant, resource_class=world.rc, amount=2)
    with pytest.raises(QuotaExceeded) as refused:
        submit(world, 990)
    assert "pools hold only" in refused.value.detail or "pool holds only" in refused.value.detail
    assert "ask for fewer units or pods" in refused.value.detail
    assert "more" not in refused.value.detail
    with pytest.raises(QuotaExceeded, match="ask for"):
        submit(world, 9)  # fits the pool: the grant is short, and it says by how much
