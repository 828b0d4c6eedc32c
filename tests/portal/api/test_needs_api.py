"""The submit API takes a need instead of resources, and says what is wrong with a bad one."""

import pytest

from scheduler.workloads.models import Workload
from tests.portal.api.conftest import session

pytestmark = pytest.mark.django_db


def _body(world, **extra):
    return {
        "tenant": world.tenant.slug, "name": "by-need", "kind": "job", "image": "busybox:1.36",
        "priority": "gpu-low", **extra,
    }  # fmt: skip


def test_submit_by_need_gets_the_shape_chosen(api, world):
    need = {"gpu_model": "A100-80GB", "gpu_memory_gb": 40, "compute_slices": 3}
    answer = session(world.member).post(
        "/api/v1/workloads/", _body(world, need=need), format="json"
    )
    assert answer.status_code == 201, answer.data
    assert answer.data["resources"] == {world.rc.slug: 1}


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({}, "resources"),
        (
            {"resources": {"x": 1}, "need": {"gpu_model": "A100-80GB", "compute_slices": 1}},
            "resources",
        ),
        ({"need": {"gpu_model": "A100-80GB", "gpu_memory_gb": 1000}}, "need"),
        ({"need": {"gpu_model": "Z9000", "gpu_memory_gb": 10}}, "need"),
        ({"need": {"gpu_model": "A100-80GB"}}, "need"),
        ({"need": {"gpu_model": "A100-80GB", "compute_slices": -1}}, "need"),
    ],
)
def test_bad_needs_are_a_400_that_names_the_field(api, world, extra, field):
    before = Workload.objects.count()
    answer = session(world.member).post("/api/v1/workloads/", _body(world, **extra), format="json")
    assert answer.status_code == 400, answer.data
    assert field in str(answer.data)
    assert Workload.objects.count() == before
