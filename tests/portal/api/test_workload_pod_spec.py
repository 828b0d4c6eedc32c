"""The API's workload pod asks (issue 15): cpu, memory, ephemeral storage, shm, volumes and
Secrets in and out, each bad value a 400 on its field, a replay with the same fields, and the
schema's types."""

import pytest

from scheduler.workloads.models import Workload
from tests.portal.api.conftest import bearer, session

pytestmark = pytest.mark.django_db

ASKS = {
    "cpu": "8",
    "memory": "64Gi",
    "ephemeral_storage": "100Gi",
    "shm": "16Gi",
    "volumes": [
        {"claim": "imagenet", "mount_path": "/data", "read_only": True},
        {"claim": "checkpoints", "mount_path": "/checkpoints", "read_only": False},
    ],
    "env_from_secrets": ["wandb"],
    "image_pull_secrets": ["registry-team-a"],
}


def job(world, name="train-big", **asks):
    return {
        "tenant": world.tenant.slug,
        "name": name,
        "kind": "job",
        "image": "pytorch/pytorch:2.4-cuda12.4",
        "resources": {world.rc.slug: 1},
        "priority": "gpu-low",
        **asks,
    }


def test_the_asks_are_stored_answered_and_listed(api, world):
    client = bearer(api.raw["all"])
    response = client.post("/api/v1/workloads/", job(world, **ASKS), format="json")

    assert response.status_code == 201, response.json()
    assert {k: response.json()[k] for k in ASKS} == ASKS
    detail = client.get(f"/api/v1/workloads/{response.json()['id']}/").json()
    assert {k: detail[k] for k in ASKS} == ASKS
    stored = Workload.objects.get(name="train-big")
    assert stored.volumes == ASKS["volumes"] and stored.cpu == "8"


def test_read_only_defaults_to_false_and_a_number_is_a_quantity(api, world):
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/",
        job(world, cpu=4, volumes=[{"claim": "data", "mount_path": "/data"}]),
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["cpu"] == "4"
    assert response.json()["volumes"] == [
        {"claim": "data", "mount_path": "/data", "read_only": False}
    ]


def test_a_workload_without_asks_answers_empty_ones(api, world):
    response = bearer(api.raw["all"]).post("/api/v1/workloads/", job(world), format="json")
    assert response.status_code == 201
    body = response.json()
    assert [body[k] for k in ("cpu", "memory", "ephemeral_storage", "shm")] == ["", "", "", ""]
    assert (body["volumes"], body["env_from_secrets"], body["image_pull_secrets"]) == ([], [], [])


def test_a_replay_answers_the_same_asks(api, world):
    client = bearer(api.raw["all"])
    first = client.post(
        "/api/v1/workloads/", job(world, **ASKS), format="json", HTTP_IDEMPOTENCY_KEY="pod-1"
    )
    again = client.post(
        "/api/v1/workloads/", job(world, **ASKS), format="json", HTTP_IDEMPOTENCY_KEY="pod-1"
    )
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert {k: again.json()[k] for k in ASKS} == ASKS
    other = client.post(
        "/api/v1/workloads/",
        job(world, **{**ASKS, "memory": "32Gi"}),
        format="json",
        HTTP_IDEMPOTENCY_KEY="pod-1",
    )
    assert other.status_code == 409 and other.json()["code"] == "idempotency_key_reused"
    assert Workload.objects.filter(name="train-big").count() == 1


@pytest.mark.parametrize(
    ("asks", "field", "says"),
    [
        ({"cpu": "-2"}, "cpu", "must not be negative"),
        ({"cpu": "0"}, "cpu", "above zero"),
        ({"cpu": "1000"}, "cpu", "WORKLOAD_MAX_CPU"),
        ({"memory": "64GB"}, "memory", "e.g. 64Gi"),
        ({"ephemeral_storage": "lots"}, "ephemeral_storage", "e.g. 100Gi"),
        ({"memory": "8Gi", "shm": "16Gi"}, "shm", "counts against the container's memory"),
        ({"shm": "8Gi"}, "shm", "give memory too"),
        ({"volumes": [{"claim": "d", "mount_path": "/proc"}]}, "volumes", "is under /proc"),
        ({"volumes": [{"claim": "d", "mount_path": "rel"}]}, "volumes", "absolute path"),
        ({"volumes": [{"claim": "D!", "mount_path": "/d"}]}, "volumes", "not a Persistent"),
        ({"volumes": [{"mount_path": "/d"}]}, "volumes", "required"),
        ({"volumes": "d:/d"}, "volumes", ""),
        ({"env_from_secrets": ["Bad_Name"]}, "env_from_secrets", "is not a Secret name"),
        ({"image_pull_secrets": ["a", "a"]}, "image_pull_secrets", "named twice"),
        ({"cpu": {"cores": 8}}, "cpu", ""),
    ],
)
def test_a_bad_ask_is_a_400_on_its_field(api, world, asks, field, says):
    response = bearer(api.raw["all"]).post("/api/v1/workloads/", job(world, **asks), format="json")

    assert response.status_code == 400, response.json()
    body = response.json()
    assert list(body["errors"]) == [field], body
    assert says in str(body), body
    assert not Workload.objects.filter(name="train-big").exists()


def test_more_than_a_namespace_ever_runs_is_a_409_on_the_field(api, world, settings):
    settings.TENANT_CPU_QUOTA = "16"
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/", job(world, cpu="32"), format="json"
    )
    assert response.status_code == 409
    assert response.json()["code"] == "quota_exceeded"
    assert list(response.json()["errors"]) == ["cpu"]


def test_the_schema_types_the_asks(api, world):
    schema = session(world.member).get("/api/schema/", {"format": "json"}).json()["components"]
    create = schema["schemas"]["WorkloadCreateRequest"]["properties"]
    for name in ("cpu", "memory", "ephemeral_storage", "shm"):
        assert create[name]["type"] == "string"
    assert create["volumes"]["type"] == "array"
    volume = schema["schemas"]["VolumeRequest"]
    assert volume["required"] == ["claim", "mount_path"]
    assert volume["properties"]["read_only"]["type"] == "boolean"
    assert create["env_from_secrets"] == {**create["env_from_secrets"], "type": "array"}
    assert create["env_from_secrets"]["items"]["type"] == "string"
    shown = schema["schemas"]["Workload"]["properties"]
    assert {"cpu", "memory", "shm", "volumes", "image_pull_secrets"} <= set(shown)
