"""A GPU that fails under a team's pod: the time after it is flagged on the statement and not
billed where the health policy says so; a rule that does not waive leaves the bill alone."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from metering import exports, selectors
from metering.models import AllocationInterval
from scheduler.cluster.models import Cluster
from scheduler.health.models import HealthEvent, HealthImpact

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 15, 12, 0, tzinfo=UTC)


def _interval(world, cluster, uid, start, end):
    return AllocationInterval.objects.create(
        cluster=cluster,
        pod_uid=uid,
        namespace=world.tenant.namespace,
        pod_name=f"train-{uid}",
        node_name="b200-0",
        tenant=world.tenant,
        resource_class=world.rc,
        resource_name=world.rc.resource_name,
        units=1,
        started_at=start,
        last_seen_at=end,
        ended_at=end,
    )


def _failure(world, cluster, uid, at, *, waive):
    event = HealthEvent.objects.create(
        cluster=cluster,
        node_name="b200-0",
        gpu="3",
        signal="xid",
        action="drain",
        description="XID 79 (GPU has fallen off the bus)",
        waive_billing=waive,
        opened_at=at,
        last_seen_at=at,
    )
    HealthImpact.objects.create(
        event=event, pod_uid=uid, namespace=world.tenant.namespace, pod_name=f"train-{uid}",
        tenant=world.tenant, outcome="evicted", evicted_at=at,
    )  # fmt: skip


@time_machine.travel(NOW, tick=False)
def test_the_hours_after_a_gpu_failed_under_the_pod_are_flagged_and_not_billed(world):
    cluster = Cluster.objects.create(name="local")
    start = NOW - timedelta(hours=4)
    _interval(world, cluster, "hit", start, start + timedelta(hours=3))
    _interval(world, cluster, "other", start, start + timedelta(hours=3))
    _interval(world, cluster, "kept", start, start + timedelta(hours=3))
    _failure(world, cluster, "hit", start + timedelta(hours=1), waive=True)  # 2 h after
    _failure(world, cluster, "kept", start + timedelta(hours=1), waive=False)
    month = date(2026, 11, 1)
    statement = selectors.tenant_statement(world.tenant, month, basis="allocation", now=NOW)
    (line,) = statement.lines
    price = world.rc.price_per_hour
    assert price > 0
    assert line.allocated_hours == Decimal(9)
    assert line.waived_hours == Decimal(2)
    assert line.waived_cost == (2 * price).quantize(Decimal("0.01"))
    assert line.billed_cost == line.allocated_cost - line.waived_cost
    exported = exports.statement_dict(world.tenant, month, statement)
    assert exported["totals"]["waived_cost"] == str(line.waived_cost)
    assert exported["lines"][0]["waived_hours"] == "2.0000"
