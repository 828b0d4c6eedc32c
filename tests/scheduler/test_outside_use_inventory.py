"""GPUs used outside the portal, as the inventory sync writes them (issue 48, 4): the pools
leave them out, the audit says so, grants already made stand and new asks see less."""

from decimal import Decimal

import pytest

from catalog.models import Pool
from core.errors import CapacityExceeded
from scheduler.cluster import inventory
from scheduler.cluster.models import PodAllocation
from tenants.models import AuditEvent, CapacityRequest, QuotaGrant
from tenants.selectors import pool_summary
from tenants.services.approvals import approve_capacity_request
from tenants.services.grants import grant_quota
from tenants.services.requests import preview_capacity_request, submit_capacity_request
from tests.scheduler.inventory_readings import gpu_node, gpu_pod, reading
from tests.tenants.factories import CapacityRequestFactory, CapacityRequestItemFactory

pytestmark = pytest.mark.django_db

H200 = "h200-141gb"
NODE = gpu_node("gpu-h200-0")


def pool() -> Pool:
    return Pool.objects.get(resource_class__slug=H200)


def synced_events():
    return AuditEvent.objects.filter(verb="pool.synced", object_id=str(pool().pk)).order_by("id")


def test_the_sync_leaves_out_what_pods_outside_the_teams_hold_and_audits_it(world):
    pods = [
        gpu_pod("serving", "llm", "gpu-h200-0", {"nvidia.com/gpu": 2}),
        gpu_pod("tenant-team-a", "train", "gpu-h200-0", {"nvidia.com/gpu": 3}),
        gpu_pod("gpu-operator", "cuda-validator", "gpu-h200-0", {"nvidia.com/gpu": 1}),
        gpu_pod("serving", "done", "gpu-h200-0", {"nvidia.com/gpu": 1}, phase="Succeeded"),
    ]
    result = inventory.record_inventory(
        reading([NODE], pods, teams={"tenant-team-a": world.tenant.slug})
    )

    row = pool()
    assert (row.offered, row.outside_use, row.capacity) == (8, 2, 6)
    assert row.outside_namespaces == {"serving": 2} and row.source == Pool.Source.CLUSTER
    assert result.pools_changed[H200] == (0, 6)
    [event] = synced_events()
    assert event.after == {
        "capacity": 6,
        "source": "cluster",
        "outside_use": 2,
        "outside_namespaces": {"serving": 2},
    }
    # the pods are mirrored as before: the team's with its tenant, the others with none
    held = dict(PodAllocation.objects.values_list("namespace", "tenant__slug").distinct())
    assert held == {"serving": None, "tenant-team-a": "team-a", "gpu-operator": None}

    # idempotent: the same reading changes nothing and audits nothing
    again = inventory.record_inventory(
        reading([NODE], pods, teams={"tenant-team-a": world.tenant.slug})
    )
    assert again.pools_changed == {} and synced_events().count() == 1

    # the serving pods go: the pool has its GPUs back, and the audit says so
    inventory.record_inventory(reading([NODE], pods[1:], teams={"tenant-team-a": "team-a"}))
    assert (pool().capacity, pool().outside_use, pool().outside_namespaces) == (8, 0, {})
    last = synced_events().last()
    assert last.before["outside_use"] == 2 and last.after["outside_use"] == 0


def test_outside_use_past_what_was_free_keeps_grants_and_refuses_new_asks(world):
    world.tenant.gpu_ceiling = Decimal(64)
    world.tenant.save(update_fields=["gpu_ceiling"])
    inventory.record_inventory(reading([NODE], []))
    h200 = pool().resource_class
    grant = grant_quota(actor=world.admin, tenant=world.tenant, resource_class=h200, amount=6)
    ask = CapacityRequestFactory(tenant=world.tenant, requester=world.owner)
    CapacityRequestItemFactory(request=ask, resource_class=h200, amount=2)
    # before: 2 of 8 are free, so the ask fits
    _, free = preview_capacity_request(tenant=world.tenant, items={H200: 2})
    assert free == {H200: 2}

    # a platform's serving takes 3 GPUs outside any team
    pods = [gpu_pod("serving", "llm", "gpu-h200-0", {"nvidia.com/gpu": 3})]
    inventory.record_inventory(reading([NODE], pods))
    assert pool().capacity == 5

    # the grant made stands, whole
    grant.refresh_from_db()
    assert grant.state == QuotaGrant.State.ACTIVE and grant.amount == 6
    [line] = [x for x in pool_summary() if x.resource_class.slug == H200]
    assert (line.granted, line.grantable, line.shortfall) == (6, 5, 1)
    assert line.outside_said == "serving (3)"

    # the waiting ask no longer fits: approving it is refused, and so is the same ask anew
    with pytest.raises(CapacityExceeded, match="only 0 of 5 can still be granted"):
        approve_capacity_request(actor=world.admin, request=ask)
    ask.refresh_from_db()
    assert ask.state == CapacityRequest.State.SUBMITTED
    with pytest.raises(CapacityExceeded):
        submit_capacity_request(
            actor=world.owner,
            tenant=world.tenant,
            items={H200: 1},
            ends_at=None,
            justification="more",
        )


def test_a_capacity_set_by_hand_is_the_whole_of_it(world):
    from catalog.services import set_pool

    pods = [gpu_pod("serving", "llm", "gpu-h200-0", {"nvidia.com/gpu": 3})]
    inventory.record_inventory(reading([NODE], pods))
    changed = set_pool(actor=world.admin, resource_class=pool().resource_class, capacity=4)
    assert (changed.capacity, changed.outside_use, changed.outside_namespaces) == (4, 0, {})
    event = AuditEvent.objects.filter(verb="pool.changed").latest("id")
    assert event.before["outside_use"] == 3 and event.after["outside_use"] == 0
