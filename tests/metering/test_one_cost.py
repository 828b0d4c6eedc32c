"""What a job costs is one number: what its team is billed for it. A gang of 2 pods admitted
with 4 slices each, of which one pod ran (the other never placed), costs the 4 that ran — on
its page, in the API and in the statement's by-workload table, which adds up to the statement."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from metering import selectors
from metering.models import AllocationInterval
from scheduler.cluster.models import Cluster
from scheduler.workloads.models import Workload
from tests.scheduler.factories import WorkloadFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 15, 12, 0, tzinfo=UTC)


def held(world, cluster, workload, uid, units, hours):
    start = NOW - timedelta(hours=hours)
    return AllocationInterval.objects.create(
        cluster=cluster, pod_uid=uid, namespace=world.tenant.namespace, pod_name=f"gang-{uid}",
        node_name="a100-0", tenant=world.tenant, resource_class=world.rc, workload=workload,
        resource_name=world.rc.resource_name, units=units, started_at=start, last_seen_at=NOW,
        ended_at=NOW,
    )  # fmt: skip


@time_machine.travel(NOW, tick=False)
def test_a_half_placed_gang_costs_what_ran_on_its_page_in_the_api_and_in_the_statement(
    world, client, settings
):
    settings.BILLING_BASIS = "allocation"
    cluster = Cluster.objects.create(name="local")
    gang = WorkloadFactory(
        tenant=world.tenant, name="gang", resources={world.rc.slug: 4}, replicas=2,
        state=Workload.State.PENDING, reason="GangIncomplete", started_at=NOW - timedelta(hours=2),
    )  # fmt: skip
    other = WorkloadFactory(tenant=world.tenant, name="solo", resources={world.rc.slug: 1})
    held(world, cluster, gang, "pod-0", 4, 2)  # pod 1 never ran: no interval
    held(world, cluster, other, "solo-0", 1, 3)
    price = world.rc.price_per_hour
    assert price > 0
    expected = (price * 4 * 2).quantize(Decimal("0.01"))

    client.force_login(world.member)
    page = client.get(f"/workloads/{gang.pk}/").content.decode()
    shown = re.search(r'id="workload-cost">([\d.]+) ', page)
    assert shown is not None and Decimal(shown.group(1)) == expected
    assert "8 ×" in page  # what it was admitted with, beside it and labelled
    api = client.get(f"/api/v1/workloads/{gang.pk}/cost/").json()
    assert (api["cost"], api["basis"], api["admitted_with"]) == (
        str(expected),
        "allocation",
        {world.rc.slug: 8},
    )

    usage = client.get(f"/usage/teams/{world.tenant.slug}/", {"month": "2026-11"})
    rows = dict(
        re.findall(
            r">(gang|solo)</a></td>.*?<td class=\"num\">([\d.]+)</td>", usage.content.decode()
        )
    )
    assert Decimal(rows["gang"]) == expected
    statement = selectors.tenant_statement(world.tenant, NOW.date().replace(day=1), now=NOW)
    assert Decimal(rows["gang"]) + Decimal(rows["solo"]) == statement.total


def test_another_teams_workload_cost_is_not_found(world, client):
    theirs = WorkloadFactory(tenant=world.other_tenant, name="theirs")
    client.force_login(world.member)
    assert client.get(f"/api/v1/workloads/{theirs.pk}/cost/").status_code == 404
