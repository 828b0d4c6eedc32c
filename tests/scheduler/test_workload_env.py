"""A workload's env (issue 13): plain values, references to Secrets in the team's namespace,
secret-looking plain values refused, and values hidden from viewers."""

from dataclasses import replace

import pytest
from django.urls import reverse

from core.errors import InvalidInput
from scheduler.workloads import services as workloads
from scheduler.workloads.kinds.from_row import spec_for
from scheduler.workloads.kinds.manifests import Observation, observe, render_job
from scheduler.workloads.kinds.pod_template import SecretKeyRef, env_values
from scheduler.workloads.models import Workload
from scheduler.workloads.selectors import env_shown
from scheduler.workloads.submit.input import check_env
from scheduler.workloads.submit.spec import workload_spec
from tenants.services.grants import grant_quota
from tests.scheduler.test_workloads import SPEC

S3 = {"secret": "s3-creds", "key": "secret-key"}


# --- parsing (pure) -----------------------------------------------------------------------------


def test_plain_values_are_kept_as_they_were():
    env = {"EPOCHS": "3", "NCCL_DEBUG": "INFO", "EMPTY": "", "TOKENIZERS_PARALLELISM": "false"}
    assert check_env(env) == env
    assert check_env(None) == {}


def test_a_secret_reference_is_kept_in_its_one_shape():
    env = {"AWS_SECRET_ACCESS_KEY": dict(S3), "AWS_REGION": "eu-west-1"}
    assert check_env(env) == {"AWS_SECRET_ACCESS_KEY": S3, "AWS_REGION": "eu-west-1"}


@pytest.mark.parametrize(
    "name",
    [
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "PGPASSWORD",
        "HF_TOKEN",
        "GITHUB_TOKEN",
        "hfToken",
        "OPENAI_API_KEY",
        "WANDB_APIKEY",
        "SSH_PRIVATE_KEY",
        "GCP_CREDENTIALS",
        "client_secret",
    ],
)
def test_a_secret_looking_name_with_a_plain_value_is_refused(name):
    with pytest.raises(InvalidInput) as err:
        check_env({name: "hunter2-correct-horse"})
    assert err.value.field == "env"
    assert err.value.code == "secret_in_env"
    assert f"env {name}:" in err.value.detail
    assert "Secret in the team's namespace" in err.value.detail
    assert f'"{name}": {{"secret": "<secret name>", "key": "<key>"}}' in err.value.detail
    assert "hunter2" not in err.value.detail  # a refusal never repeats the secret


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("AKIAIOSFODNN7EXAMPLE", "an AWS access key id"),
        ("ghp_" + "a1B2" * 9, "a GitHub token"),
        ("github_pat_11ABCDEFG0" + "x" * 40, "a GitHub token"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow...", "a private key"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "a private key"),
        ("postgres://app:s3cr3t@db.internal:5432/app", "a URL with a password"),
        ("xoxb-123456789012-abcdefABCDEF", "a Slack token"),
        ("hf_" + "abcdEFGH" * 4 + "ij", "a Hugging Face token"),
        ("glpat-abcdefghij0123456789", "a GitLab token"),
        ("sk-proj-abcdefghijklmnopqrstuvwx", "an API key"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc", "a JSON Web Token"),
    ],
)
def test_a_value_in_a_known_secret_format_is_refused_whatever_its_name(value, kind):
    with pytest.raises(InvalidInput) as err:
        check_env({"SETTING": value})
    assert err.value.code == "secret_in_env"
    assert f"looks like {kind}" in err.value.detail
    assert value[:12] not in err.value.detail


@pytest.mark.parametrize(
    "env",
    [
        {"MAX_TOKENS": "4096"},  # a count, not a token
        {"TOKENIZERS_PARALLELISM": "false"},
        {"POSTGRES_PASSWORD_FILE": "/run/secrets/db"},  # where the secret lives
        {"GOOGLE_APPLICATION_CREDENTIALS": "/var/secrets/google/key.json"},
        {"DB_PASSWORD": ""},  # nothing to leak
        {"MODEL_URL": "https://huggingface.co/meta-llama/Llama-3-8B"},
        {"AWS_REGION": "eu-west-1", "HF_HOME": "/cache/hf"},
    ],
)
def test_ordinary_settings_are_not_mistaken_for_secrets(env):
    assert check_env(env) == env


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"secret": "S3_Creds", "key": "k"}, "secret 'S3_Creds' is not a Secret name"),
        ({"secret": "-s3", "key": "k"}, "is not a Secret name"),
        ({"secret": "a" * 254, "key": "k"}, "is not a Secret name"),
        ({"secret": "s3-creds", "key": "secret/key"}, "key 'secret/key' is not a key"),
        ({"secret": "s3-creds", "key": ".."}, "is not a key"),
        ({"secret": "s3-creds", "key": ""}, "is not a key"),
        ({"secret": "s3-creds"}, "a Secret reference has the fields secret and key"),
        ({"secret": "s3", "key": "k", "optional": True}, "has the fields secret and key"),
        ({"secret": 3, "key": "k"}, "is not a Secret name"),
        (3, 'give a string, or {"secret": ..., "key": ...}'),
        (["a"], 'give a string, or {"secret": ..., "key": ...}'),
        ("nul\x00", "must not contain NUL"),
    ],
)
def test_a_bad_secret_reference_or_value_says_what_to_change(value, message):
    with pytest.raises(InvalidInput, match="^env X: ") as err:
        check_env({"X": value})
    assert message in err.value.detail
    assert err.value.field == "env"


# --- rendering (pure) ---------------------------------------------------------------------------


def test_a_secret_reference_renders_as_a_secret_key_ref_and_plain_values_as_values():
    spec = replace(
        SPEC, env={"EPOCHS": "3", "AWS_SECRET_ACCESS_KEY": SecretKeyRef("s3-creds", "secret-key")}
    )
    container = render_job(spec)["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [
        {
            "name": "AWS_SECRET_ACCESS_KEY",
            "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "secret-key"}},
        },
        {"name": "EPOCHS", "value": "3"},
    ]


def test_the_stored_env_becomes_the_specs_values():
    assert env_values({"A": "1", "B": dict(S3)}) == {
        "A": "1",
        "B": SecretKeyRef("s3-creds", "secret-key"),
    }


def test_a_pod_waiting_for_a_missing_secret_says_so():
    pod = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [
                {
                    "name": "main",
                    "state": {
                        "waiting": {
                            "reason": "CreateContainerConfigError",
                            "message": 'secret "s3-creds" not found',
                        }
                    },
                }
            ],
        },
    }
    job = {"spec": {"suspend": False}, "status": {}}
    assert observe("job", job, [pod], []) == Observation(
        Workload.State.PENDING, "CreateContainerConfigError", 'secret "s3-creds" not found'
    )


# --- who sees what (pure) -----------------------------------------------------------------------


def test_viewers_see_names_only_and_writers_see_plain_values_and_references():
    env = {"EPOCHS": "3", "AWS_SECRET_ACCESS_KEY": dict(S3)}
    assert env_shown(env, values=False) == {"EPOCHS": None, "AWS_SECRET_ACCESS_KEY": None}
    assert env_shown(env, values=True) == env


# --- admission and the page ----------------------------------------------------------------------


@pytest.fixture
def granted(world, settings):
    settings.WORKLOAD_IMAGE_ALLOWLIST = ["*"]
    grant_quota(actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=4)
    return world


def submit(world, env):
    return workloads.submit_workload(
        actor=world.member,
        tenant=world.tenant,
        spec=workload_spec(
            name="sync-s3",
            kind="job",
            image="amazon/aws-cli:2",
            resources={world.rc.slug: 1},
            priority="gpu-low",
            env=env,
        ),
    )


@pytest.mark.django_db
def test_a_submitted_secret_reference_reaches_the_pod_spec(granted):
    workload = submit(granted, {"AWS_SECRET_ACCESS_KEY": dict(S3), "BUCKET": "data"})
    workload.refresh_from_db()
    assert workload.env == {"AWS_SECRET_ACCESS_KEY": S3, "BUCKET": "data"}
    container = render_job(spec_for(workload))["spec"]["template"]["spec"]["containers"][0]
    assert container["env"][0]["valueFrom"] == {
        "secretKeyRef": {"name": "s3-creds", "key": "secret-key"}
    }


@pytest.mark.django_db
def test_a_plain_secret_is_refused_at_admission_and_nothing_is_written(granted):
    with pytest.raises(InvalidInput) as err:
        submit(granted, {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"})
    assert err.value.code == "secret_in_env"
    assert not Workload.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["viewer", "member", "owner", "admin"])
def test_the_workload_page_shows_env_values_to_writers_and_names_to_viewers(client, granted, who):
    workload = submit(granted, {"AWS_SECRET_ACCESS_KEY": dict(S3), "BUCKET": "team-a-data"})
    client.force_login(getattr(granted, who))

    body = client.get(reverse("scheduler:workload_detail", args=[workload.pk])).content.decode()

    assert "AWS_SECRET_ACCESS_KEY" in body and "BUCKET" in body
    sees_values = who != "viewer"
    assert ("team-a-data" in body) == sees_values
    assert ("s3-creds" in body) == sees_values
    assert ("values are shown to members and owners" in body) == (not sees_values)


def form_submit(client, env):
    data = {
        "name": "sync-s3",
        "kind": "job",
        "image": "amazon/aws-cli:2",
        "command": "aws s3 sync s3://bucket /data",
        "resource_class": "a100-80gb-mig-3g.40gb",
        "units": 1,
        "priority": "gpu-low",
        "replicas": 1,
        "backoff_limit": 0,
        "env": env,
    }
    return client.post(reverse("scheduler:workload_create", args=["team-a"]), data, follow=True)


@pytest.mark.django_db
def test_the_submit_form_takes_secret_references_too(client, granted):
    client.force_login(granted.member)

    form_submit(client, "AWS_SECRET_ACCESS_KEY=secretKeyRef:s3-creds/secret-key\nBUCKET=a=b")

    assert Workload.objects.get().env == {"AWS_SECRET_ACCESS_KEY": S3, "BUCKET": "a=b"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("env", "says"),
    [
        ("DB_PASSWORD=hunter2", "Put it in a Secret in the team&#x27;s namespace"),
        ("X=secretKeyRef:s3-creds", "line 1: write KEY=secretKeyRef:SECRET/KEY"),
        ("X=secretKeyRef:S3/k", "secret &#x27;S3&#x27; is not a Secret name"),
    ],
)
def test_the_submit_form_refuses_plain_secrets_by_the_field(client, granted, env, says):
    client.force_login(granted.member)

    body = form_submit(client, env).content.decode()

    assert says in body
    assert "hunter2" not in body.split("<textarea")[0]  # only the form keeps what was typed
    assert not Workload.objects.exists()
