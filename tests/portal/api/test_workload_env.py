"""The API's workload env (issue 13): Secret references in, plain secrets refused with a 400
that says what to do, and values never shown to viewers."""

import pytest

from scheduler.workloads import services as workloads
from scheduler.workloads.models import Workload
from scheduler.workloads.submit.spec import workload_spec
from tests.portal.api.conftest import bearer, session

pytestmark = pytest.mark.django_db

S3 = {"secret": "s3-creds", "key": "secret-key"}


def job(world, env, name="sync-s3"):
    return {
        "tenant": world.tenant.slug,
        "name": name,
        "kind": "job",
        "image": "amazon/aws-cli:2",
        "resources": {world.rc.slug: 1},
        "priority": "gpu-low",
        "env": env,
    }


def test_a_secret_reference_is_accepted_and_shown_to_its_submitter(api, world):
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/",
        job(world, {"AWS_SECRET_ACCESS_KEY": S3, "BUCKET": "d"}),
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["env"] == {"AWS_SECRET_ACCESS_KEY": S3, "BUCKET": "d"}
    assert Workload.objects.get(name="sync-s3").env == {"AWS_SECRET_ACCESS_KEY": S3, "BUCKET": "d"}


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}, "refer to it"),
        ({"S3_KEY_ID": "AKIAIOSFODNN7EXAMPLE"}, "looks like an AWS access key id"),
        ({"CI": "ghp_" + "a1B2" * 9}, "looks like a GitHub token"),
    ],
)
def test_a_plain_secret_is_a_400_that_says_to_use_a_secret_reference(api, world, env, says):
    response = bearer(api.raw["all"]).post("/api/v1/workloads/", job(world, env), format="json")

    assert response.status_code == 400
    body = response.json()
    assert set(body) == {"code", "detail", "errors"}
    assert body["code"] == "secret_in_env"
    assert list(body["errors"]) == ["env"]
    assert says in body["detail"] and "Secret in the team's namespace" in body["detail"]
    assert list(env.values())[0] not in response.content.decode()  # never echoed back
    assert not Workload.objects.filter(name="sync-s3").exists()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"secret": "S3_Creds", "key": "k"}, "is not a Secret name"),
        ({"secret": "s3-creds", "key": "a/b"}, "is not a key"),
        ({"secret": "s3-creds"}, "has the fields secret and key"),
        ({"secret": "s3-creds", "key": "k", "extra": "x"}, "has the fields secret and key"),
        (7, 'give a string, or {"secret": ..., "key": ...}'),
    ],
)
def test_a_bad_secret_reference_is_a_400_on_env(api, world, value, says):
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/", job(world, {"X": value}), format="json"
    )

    assert response.status_code == 400, response.json()
    body = response.json()
    assert list(body["errors"]) == ["env"], body
    assert says in str(body), body


@pytest.fixture
def with_env(api, world):
    return workloads.submit_workload(
        actor=world.member,
        tenant=world.tenant,
        spec=workload_spec(
            name="with-env",
            kind="job",
            image="amazon/aws-cli:2",
            resources={world.rc.slug: 1},
            priority="gpu-low",
            env={"AWS_SECRET_ACCESS_KEY": S3, "BUCKET": "team-a-data"},
        ),
    )


@pytest.mark.parametrize("who", ["viewer", "member", "owner", "admin"])
def test_viewers_see_env_names_only_in_lists_and_details(world, with_env, who):
    client = session(getattr(world, who))
    expected = (
        {"AWS_SECRET_ACCESS_KEY": None, "BUCKET": None}
        if who == "viewer"
        else {"AWS_SECRET_ACCESS_KEY": S3, "BUCKET": "team-a-data"}
    )

    listed = client.get("/api/v1/workloads/", {"name": "with-env"}).json()["results"]
    detail = client.get(f"/api/v1/workloads/{with_env.pk}/").json()

    assert [w["env"] for w in listed if w["name"] == "with-env"] == [expected]
    assert detail["env"] == expected
    if who == "viewer":
        assert "team-a-data" not in str(listed) + str(detail)


def test_the_schema_describes_both_env_shapes(api, world):
    schema = session(world.member).get("/api/schema/", {"format": "json"}).json()
    create = schema["components"]["schemas"]["WorkloadCreateRequest"]["properties"]["env"]
    shapes = create["additionalProperties"]["oneOf"]
    assert {"type": "string"} in shapes
    ref = next(s for s in shapes if s.get("type") == "object")
    assert ref["required"] == ["secret", "key"] and ref["additionalProperties"] is False
