"""What the CI path's calls cost (issue 19): queries per status and submit call, pinned; the fast
workload representation against DRF's generic one; the env-values column against its selector."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIRequestFactory

from core.errors import NotFound
from scheduler.workloads import services as workloads
from scheduler.workloads.api import serializers as s
from scheduler.workloads.api import submit_serializers as submit
from scheduler.workloads.api.views import WorkloadViewSet
from scheduler.workloads.models import Workload, WorkloadEvent
from scheduler.workloads.selectors import env_values_readable
from scheduler.workloads.submit.spec import workload_spec
from tenants.api.views import visible_tenant
from tenants.models import Tenant
from tenants.permissions import role_in
from tests.portal.api.conftest import bearer
from tests.tenants.factories import QuotaGrantFactory

pytestmark = pytest.mark.django_db


def _submit_body(api, name: str) -> dict:
    return {
        "tenant": api.world.tenant.slug,
        "name": name,
        "kind": "job",
        "image": "pytorch/pytorch:2.4-cuda12.4",
        "command": ["python", "train.py"],
        "resources": {api.world.rc.slug: 1},
        "priority": "gpu-low",
    }


@pytest.fixture(autouse=True)
def _token_stays_cached(settings):
    """The counts below hold while the token is cached: a long bound, so a slow machine's
    pause between two calls does not let it lapse (its bound has tests of its own)."""
    settings.API_TOKEN_CACHE_SECONDS = 300


def test_a_status_call_is_one_query_once_the_token_is_cached(api, django_assert_num_queries):
    client = bearer(api.raw["all"])
    url = f"/api/v1/workloads/{api.workload.pk}/"
    assert client.get(url).status_code == 200  # reads the token, records its use, caches it
    # The workload, its tenant's slug, its submitter's name, whether the caller reads env
    # values, and its events: one query.
    with django_assert_num_queries(1):
        response = client.get(url)
    assert response.status_code == 200
    assert response.json()["events"][0]["reason"] == "Submitted"


def test_a_status_call_with_a_token_not_yet_cached_reads_it_once(api, django_assert_num_queries):
    client = bearer(api.raw["read"])
    # the token with its user, the record of its first use, the workload
    with django_assert_num_queries(3):
        assert client.get(f"/api/v1/workloads/{api.workload.pk}/").status_code == 200


def test_a_submit_is_nine_queries_once_the_token_is_cached(api, django_assert_num_queries):
    client = bearer(api.raw["all"])
    assert client.get("/api/v1/workloads/").status_code == 200  # caches the token
    # Before the lock: the tenant (visible to the caller) with the caller's role; the resource
    # class with its pool. Then one transaction (two savepoint statements here, BEGIN and
    # COMMIT in production): the tenant lock; name taken?, grants and the next id in one
    # statement; the workload (with its k8s name), its event, the audit row. No read back of
    # the workload, and no count of what the team's pods hold (Kueue's to weigh).
    with django_assert_num_queries(9):
        response = client.post("/api/v1/workloads/", _submit_body(api, "ci-1"), format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["tenant"], body["submitted_by"], body["k8s_name"]) == (
        api.world.tenant.slug,
        api.world.member.username,
        f"ci-1-{body['id']}",
    )


def test_a_submit_answers_what_a_status_call_then_shows(api):
    client = bearer(api.raw["all"])
    body = {**_submit_body(api, "ci-2"), "env": {"MODE": "fast"}, "labels": {"team": "cv"}}
    created = client.post("/api/v1/workloads/", body, format="json").json()
    assert created["env"] == {"MODE": "fast"}  # the submitter reads the values
    shown = client.get(f"/api/v1/workloads/{created['id']}/").json()
    # the detail's own fields besides: its events, and why it waits (null: it does not)
    assert shown["waiting"] is None
    assert {k: v for k, v in shown.items() if k not in ("events", "waiting")} == created


def _generic(serializer) -> dict:
    """DRF's own field-by-field representation, which the fast one must equal."""
    return serializers.ModelSerializer.to_representation(serializer, serializer.instance)


def _json(data) -> dict:
    return json.loads(JSONRenderer().render(data))


@pytest.fixture
def varied(api) -> list[Workload]:
    """A plain job, a job with every pod ask and a finished history, an autoscaled deployment."""
    QuotaGrantFactory(tenant=api.world.tenant, resource_class=api.world.rc, amount=20)
    rc = api.world.rc.slug
    full = workloads.submit_workload(
        actor=api.world.member,
        tenant=api.world.tenant,
        spec=workload_spec(
            name="full",
            kind="job",
            image="pytorch/pytorch:2.4-cuda12.4",
            command=["torchrun", "train.py"],
            args=["--epochs", "3"],
            env={"MODE": "fast", "WANDB_KEY": {"secret": "wandb", "key": "api-key"}},
            labels={"team": "vision"},
            resources={rc: 1},
            priority="gpu-low",
            cpu="8",
            memory="64Gi",
            shm="8Gi",
            volumes=[{"claim": "data", "mount_path": "/data", "read_only": True}],
            env_from_secrets=["wandb"],
            image_pull_secrets=["registry"],
        ),
    )
    now = timezone.now()
    Workload.objects.filter(pk=full.pk).update(
        state=Workload.State.FAILED,
        reason="BackoffLimitExceeded",
        message="exit code 1",
        k8s_uid="0f8e2c1a-7d43-4e5b-9c61-2a9b8d7e6f50",
        cluster_created_at=now,
        started_at=now + timedelta(seconds=3),
        finished_at=now + timedelta(minutes=5, microseconds=1),
        queue_position=None,
    )
    WorkloadEvent.objects.create(workload=full, state="running", reason="Started", message="")
    scaled = workloads.submit_workload(
        actor=api.world.member,
        tenant=api.world.tenant,
        spec=workload_spec(
            name="serve",
            kind="deployment",
            image="vllm/vllm-openai:v0.6.3",
            resources={rc: 1},
            priority="gpu-low",
            autoscaling={"min_replicas": 1, "max_replicas": 2, "target_gpu_util": 70},
        ),
    )
    Workload.objects.filter(pk=scaled.pk).update(state=Workload.State.QUEUED, queue_position=3)
    return [api.workload, Workload.objects.get(pk=full.pk), Workload.objects.get(pk=scaled.pk)]


@pytest.mark.parametrize("reader", ["member", "viewer", "admin"])
def test_the_fast_representation_is_drfs_field_by_field(api, varied, reader):
    user = {"member": api.world.member, "viewer": api.world.viewer, "admin": api.world.admin}[
        reader
    ]
    request = APIRequestFactory().get("/")
    request.user = user
    view = WorkloadViewSet(request=request, action="retrieve", format_kwarg=None)
    annotated = {w.pk: w for w in view.get_queryset()}
    for workload in varied:
        for instance in (workload, annotated[workload.pk]):  # bare, and as the view reads it
            serializer = s.WorkloadDetailSerializer(instance, context={"request": request})
            assert _json(serializer.data) == _json(_generic(serializer))
            listed = s.WorkloadSerializer(instance, context={"request": request})
            assert _json(listed.data) == _json(_generic(listed))


def test_the_env_values_column_agrees_with_the_selector_for_every_role(api, varied):
    world = api.world
    for user in (world.owner, world.member, world.viewer, world.outsider, world.admin):
        request = APIRequestFactory().get("/")
        request.user = user
        view = WorkloadViewSet(request=request, action="list", format_kwarg=None)
        readable = env_values_readable(user)
        rows = list(view.get_queryset())
        assert rows or user == world.outsider  # the outsider sees none of team-a's workloads
        for workload in rows:
            assert getattr(workload, s.ENV_VALUES_READABLE) == readable(workload.tenant_id)


def test_a_submit_with_an_idempotency_key_looks_for_its_record_once(api, django_assert_num_queries):
    client = bearer(api.raw["all"])
    assert client.get("/api/v1/workloads/").status_code == 200  # caches the token
    body = _submit_body(api, "ci-3")
    # the submit's 9, and around them: savepoint, advisory lock, the record looked for,
    # the record written, release
    with django_assert_num_queries(9 + 5):
        first = client.post("/api/v1/workloads/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == 201
    again = client.post("/api/v1/workloads/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"


def test_the_visible_tenant_remembers_the_callers_role_as_role_in_reads_it(
    api, django_assert_num_queries
):
    world = api.world
    for user in (world.owner, world.member, world.viewer, world.admin):
        tenant = visible_tenant(user, world.tenant.slug)
        with django_assert_num_queries(0):
            remembered = role_in(user, tenant)
        assert remembered == role_in(user, Tenant.objects.get(pk=tenant.pk))
    with pytest.raises(NotFound):
        visible_tenant(world.outsider, world.tenant.slug)


class _DrfBuilt(submit.WorkloadCreateSerializer):
    fields = serializers.Serializer.fields  # DRF's own: every instance deep-copies its fields


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"kind": "cronjob", "resources": {"x": 0}},
        {"name": "n" * 41, "replicas": 0, "env": {"A": {"secret": "s", "key": "k"}}},
        {"autoscaling": {"max_replicas": 2}, "volumes": [{"claim": "c"}], "cpu": 8},
        {"autoscaling": {"max_replicas": 3, "target_gpu_util": 70}, "command": "no list"},
        {"volumes": [{"claim": "d", "mount_path": "/d", "read_only": True}], "labels": [1]},
    ],
)
def test_the_create_serializers_shared_fields_validate_as_drfs_own(changes):
    """The submit's fields are built once and shared by every call: each call still validates
    (values and errors) exactly as DRF's freshly built fields do, whatever came before it."""
    body = {
        "tenant": "team-a", "name": "ci-1", "kind": "job", "image": "busybox:1.36",
        "resources": {"rc": 1}, "priority": "gpu-low", **changes,
    }  # fmt: skip
    shared, fresh = submit.WorkloadCreateSerializer(data=body), _DrfBuilt(data=body)
    assert shared.fields is submit.WorkloadCreateSerializer().fields
    assert shared.is_valid() == fresh.is_valid()
    assert (shared.errors, shared.validated_data) == (fresh.errors, fresh.validated_data)
