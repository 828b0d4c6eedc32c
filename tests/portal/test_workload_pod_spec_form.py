"""The browser's submit form asks for cpu, memory, ephemeral storage, shm, volumes and Secrets
(issue 15), and says what is wrong on the field."""

import pytest
from django.urls import reverse

from scheduler.workloads.models import Workload
from tests.portal.test_workload_and_token_pages import granted, submit  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


def test_the_form_sends_the_asks_and_the_detail_shows_them(client, granted):  # noqa: F811
    client.force_login(granted.member)
    response = submit(
        client,
        cpu="8",
        memory="64Gi",
        shm="16Gi",
        volumes="imagenet:/data:ro\n\ncheckpoints:/checkpoints\n",
        env_from_secrets="wandb, s3-creds",
        image_pull_secrets="registry-team-a",
    )

    w = Workload.objects.get()
    assert (w.cpu, w.memory, w.shm) == ("8", "64Gi", "16Gi")
    assert w.volumes == [
        {"claim": "imagenet", "mount_path": "/data", "read_only": True},
        {"claim": "checkpoints", "mount_path": "/checkpoints", "read_only": False},
    ]
    assert (w.env_from_secrets, w.image_pull_secrets) == (
        ["wandb", "s3-creds"],
        ["registry-team-a"],
    )
    page = response.content.decode()
    assert "8 CPU, 64Gi memory, 16Gi shared memory per pod" in page
    assert "<code>imagenet</code> at <code>/data</code> (read-only)" in page


def test_the_form_asks_for_ephemeral_storage_as_the_api_does(client, granted):  # noqa: F811
    client.force_login(granted.member)
    response = submit(client, memory="64Gi", ephemeral_storage="200Gi")

    assert Workload.objects.get().ephemeral_storage == "200Gi"
    assert "64Gi memory, 200Gi ephemeral storage per pod" in response.content.decode()


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("volumes", "imagenet", "line 1: write CLAIM:/path or CLAIM:/path:ro"),
        ("volumes", "imagenet:/proc", "is under /proc"),
        ("cpu", "-1", "must not be negative"),
        ("shm", "16Gi", "give memory too"),
        ("ephemeral_storage", "2Pi", "setting WORKLOAD_MAX_EPHEMERAL_STORAGE"),
        ("env_from_secrets", "Bad_Name", "is not a Secret name"),
    ],
)
def test_a_bad_ask_keeps_the_form_and_says_why_on_the_field(client, granted, field, value, says):  # noqa: F811
    client.force_login(granted.member)
    response = submit(client, **{field: value})

    assert not Workload.objects.exists()
    errors = response.context["form"].errors
    assert list(errors) == [field], errors
    assert says in " ".join(errors[field])
    assert 'role="alert"' in response.content.decode()


def test_the_form_labels_every_new_field(client, granted):  # noqa: F811
    client.force_login(granted.member)
    page = client.get(reverse("scheduler:workload_create", args=["team-a"])).content.decode()
    for name, label in (
        ("cpu", "CPU"),
        ("memory", "Memory"),
        ("ephemeral_storage", "Ephemeral storage"),
        ("shm", "Shared memory (/dev/shm)"),
        ("volumes", "Volumes"),
        ("env_from_secrets", "Secrets as env"),
        ("image_pull_secrets", "Image pull Secrets"),
    ):
        assert f'<label for="id_{name}">{label}</label>' in page
