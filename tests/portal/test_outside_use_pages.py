"""The console on GPUs used outside the portal (issue 48, 4): the capacity map's pools say what
the nodes offer, what namespaces outside the teams hold of it and what is left; when that use
grows past what was free, the capacity page and the approval queue warn with the shortfall."""

import re
from decimal import Decimal

import pytest

from catalog.models import ResourceClass
from scheduler.cluster import inventory
from tenants.services.grants import grant_quota
from tests.scheduler.inventory_readings import gpu_node, gpu_pod, reading

pytestmark = pytest.mark.django_db

NODE = gpu_node("gpu-h200-0")


def serving(*units: int):
    return [
        gpu_pod(ns, "llm", "gpu-h200-0", {"nvidia.com/gpu": n})
        for ns, n in zip(("serving", "not-onboarded"), units, strict=False)
    ]


def text(response) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def test_the_capacity_map_shows_use_outside_the_portal_by_namespace(client, world):
    inventory.record_inventory(reading([NODE], serving(2, 1)))
    client.force_login(world.admin)
    page = text(client.get("/console/capacity/"))
    assert "Nodes offer" in page and "Used outside the portal" in page
    # offered 8, 3 used outside, capacity 5
    assert "H200-141GB whole GPU 8 3: not-onboarded (1), serving (2) 5" in page
    assert "short" not in page  # nothing granted: nothing to warn of


def test_outside_use_past_what_was_free_is_warned_of_with_the_namespaces(client, world):
    world.tenant.gpu_ceiling = Decimal(64)
    world.tenant.save(update_fields=["gpu_ceiling"])
    inventory.record_inventory(reading([NODE], []))
    h200 = ResourceClass.objects.get(slug="h200-141gb")
    grant_quota(actor=world.admin, tenant=world.tenant, resource_class=h200, amount=7)
    inventory.record_inventory(reading([NODE], serving(2, 1)))

    client.force_login(world.admin)
    warning = (
        "H200-141GB whole GPU: 7 granted, but only 5 can be: 2 short, with 3 used outside the "
        "portal by not-onboarded (1), serving (2). Grants already made stand; new asks of it "
        "are refused until capacity frees up"
    )
    capacity_page, queue_page = (
        text(client.get("/console/capacity/")),
        text(client.get("/console/")),
    )
    assert warning in capacity_page
    assert warning in queue_page  # the approval queue
    # one pool is short, and only it is warned of
    assert queue_page.count(" short, with ") == 1 and "2 short" in capacity_page
