"""One workload spec through every door (issue 45): a submit's fields are parsed once
(`scheduler.workloads.submit.spec.parse_spec`), every bad field is said in one answer, and the
OpenAPI schema states the bounds the parser applies."""

import pytest

from core.errors import InvalidInput
from scheduler.workloads.models import Workload
from scheduler.workloads.submit.input import MAX_BACKOFF_LIMIT, MAX_REPLICAS
from scheduler.workloads.submit.spec import FIELDS, parse_spec
from tenants.models.priority_classes import PRIORITY_CLASSES
from tenants.models.tenants import DNS_LABEL_PATTERN, dns_label
from tests.portal.api.conftest import session

GOOD = {
    "name": "train",
    "kind": "job",
    "image": "busybox:1.36",
    "resources": {"a100-80gb-mig-3g.40gb": 1},
    "priority": "gpu-low",
}
# four fields wrong at once, each in its own way
BAD = {
    "name": "Not A Label",
    "env": {"1BAD": "x"},
    "backoff_limit": 99,
    "shm": "lots",
}


def test_the_parser_names_every_bad_field_at_once():
    with pytest.raises(InvalidInput) as refused:
        parse_spec({**GOOD, **BAD})
    assert set(refused.value.errors) == {"name", "env", "backoff_limit", "shm"}
    for field in refused.value.errors:
        assert field in refused.value.detail


def test_a_good_ask_parses_into_its_parts():
    spec = parse_spec({**GOOD, "kind": "deployment", "replicas": 2, "memory": "8Gi", "shm": "1Gi"})
    assert (spec.name, spec.kind, spec.size.pods) == ("train", "deployment", 2)
    assert (spec.container.memory, spec.container.shm) == ("8Gi", "1Gi")
    assert spec.resources == {"a100-80gb-mig-3g.40gb": 1}


def test_a_field_the_submit_does_not_take_is_refused_by_name():
    with pytest.raises(InvalidInput, match="colour"):
        parse_spec({**GOOD, "colour": "blue"})


@pytest.mark.django_db
def test_the_api_answers_every_bad_field_and_writes_nothing(world):
    before = Workload.objects.count()
    # what DRF lets through (its own bounds hold) and the parser refuses
    body = {**GOOD, "tenant": world.tenant.slug, "resources": {world.rc.slug: 1}}
    body.update(env={"1BAD": "x"}, shm="lots", labels={"gpu-portal/x": "y"})
    answer = session(world.member).post("/api/v1/workloads/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert set(answer.json()["errors"]) == {"env", "shm", "labels"}
    assert Workload.objects.count() == before


@pytest.mark.django_db
def test_the_form_puts_each_refusal_under_its_field(client, world):
    from tenants.services.grants import grant_quota

    grant_quota(actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=2)
    client.force_login(world.member)
    answer = client.post(
        f"/teams/{world.tenant.slug}/workloads/new/",
        {
            "name": "train",
            "kind": "job",
            "image": "busybox:1.36",
            "resource_class": world.rc.slug,
            "units": 1,
            "priority": "gpu-low",
            "replicas": 1,
            "backoff_limit": 0,
            "env": "1BAD=x",
            "shm": "lots",
        },
    )
    assert answer.status_code == 200
    form = answer.context["form"]
    assert {"env", "shm"} <= set(form.errors), form.errors
    assert not Workload.objects.filter(tenant=world.tenant).exists()


def enum(schema: dict, prop: dict) -> list:
    """A property's enum, inline or behind its $ref (drf-spectacular names shared enums)."""
    ref = prop.get("$ref") or next((p["$ref"] for p in prop.get("allOf", ())), None)
    if ref:
        return schema["components"]["schemas"][ref.rsplit("/", 1)[1]]["enum"]
    return prop["enum"]


@pytest.mark.django_db
def test_the_schema_states_the_rules_the_parser_applies(world):
    schema = session(world.member).get("/api/schema/", {"format": "json"}).json()
    create = schema["components"]["schemas"]["WorkloadCreateRequest"]["properties"]
    assert create["name"]["pattern"] == DNS_LABEL_PATTERN == dns_label.regex.pattern
    assert create["name"]["maxLength"] == 40
    assert create["replicas"]["maximum"] == MAX_REPLICAS
    assert create["pods"]["maximum"] == MAX_REPLICAS
    assert create["backoff_limit"]["maximum"] == MAX_BACKOFF_LIMIT
    assert set(enum(schema, create["kind"])) == set(Workload.Kind.values)
    assert set(enum(schema, create["priority"])) == set(PRIORITY_CLASSES)
    # every field the parser takes is one the schema names (tenant and need are the API's own)
    assert set(FIELDS) <= set(create)


@pytest.mark.parametrize(
    "bad, field, words",
    [
        ({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "env", "may not set NVIDIA_"),
        ({"env": {"NAME\n": "x"}}, "env", "use NAME"),
        ({"labels": {"team\n": "a"}}, "labels", "not a valid label"),
        ({"labels": {"team": "a\n"}}, "labels", "not a valid label"),
    ],
)
def test_the_toolkits_variables_and_names_with_a_trailing_newline_are_refused(bad, field, words):
    """Security, third pass (2, 7): the same words as the cluster guard's for NVIDIA_*; a regex
    `$` matched before a final newline, so names are matched in full."""
    with pytest.raises(InvalidInput, match=words) as refused:
        parse_spec({**GOOD, **bad})
    assert refused.value.field == field
