"""The API's answer when the image allow-list refuses an image: a 400 that says what to change."""

import pytest

from scheduler.workloads.models import Workload
from tests.portal.api.conftest import bearer

pytestmark = pytest.mark.django_db


def body(world, image):
    return {
        "tenant": world.tenant.slug,
        "name": "allow-1",
        "kind": "job",
        "image": image,
        "resources": {world.rc.slug: 1},
        "priority": "gpu-low",
    }


def test_an_empty_allow_list_refuses_with_a_400_naming_the_setting(api, world, settings):
    settings.WORKLOAD_IMAGE_ALLOWLIST = []
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/", body(world, "registry.k8s.io/pause:3.10"), format="json"
    )
    assert response.status_code == 400
    assert response.data["code"] == "image_not_allowed"
    assert "WORKLOAD_IMAGE_ALLOWLIST" in response.data["detail"]
    assert response.data["errors"] == {"image": [response.data["detail"]]}
    assert not Workload.objects.filter(name="allow-1").exists()


def test_a_look_alike_registry_is_refused_and_the_real_one_accepted(api, world, settings):
    settings.WORKLOAD_IMAGE_ALLOWLIST = ["registry.example.com"]
    client = bearer(api.raw["all"])
    evil = client.post(
        "/api/v1/workloads/", body(world, "registry.example.com.evil.io/x:1"), format="json"
    )
    assert evil.status_code == 400 and evil.data["code"] == "image_not_allowed"
    good = client.post(
        "/api/v1/workloads/", body(world, "registry.example.com/team-a/x:1"), format="json"
    )
    assert good.status_code == 201, good.data
