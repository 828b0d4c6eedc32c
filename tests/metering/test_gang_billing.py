"""Metering bills every pod of a gang: each pod of a multi-pod job has its own allocation
interval, and the team's statement counts all of them (prepared pod lists, as test_ingest); an
idle gang holds every pod's GPUs on the waste page."""

from datetime import date, timedelta
from decimal import Decimal

import pytest

from metering import selectors, waste
from metering.models import AllocationInterval
from scheduler.workloads.models import Workload
from tests.metering.helpers import pod
from tests.metering.test_ingest import T0, cluster, run  # noqa: F401 - a fixture
from tests.scheduler.factories import WorkloadFactory

pytestmark = pytest.mark.django_db


def test_a_two_pod_gang_is_billed_for_both_pods(cluster, world):  # noqa: F811 - the fixture
    reading = cluster
    reading.pods = [
        pod(
            f"ddp-7-{index}",
            "meter-team-a",
            uid=f"gang-{index}",
            node="a100-node",
            resources={"nvidia.com/mig-3g.40gb": 1},
            started=T0,
            workload=7,
        )
        for index in range(2)
    ]
    run(reading, 0)
    run(reading, 60)
    assert AllocationInterval.objects.filter(pod_uid__startswith="gang-").count() == 2
    statement = selectors.month_statements(
        date(2026, 11, 1), [world.tenant.pk], now=T0 + timedelta(minutes=60)
    )[world.tenant.pk]
    (line,) = [line for line in statement.lines if line.slug == world.rc.slug]
    assert line.allocated_hours == 2  # 2 pods × 1 unit × 1 hour


def test_an_idle_gang_holds_every_pods_gpus_right_now(world):
    WorkloadFactory(
        tenant=world.tenant,
        kind=Workload.Kind.JOB,
        replicas=3,  # a gang of 3 pods, each 1 × the class
        state=Workload.State.RUNNING,
        resources={world.rc.slug: 1},
        idle_since=T0,
    )
    fraction = world.rc.gpu_fraction
    (row,) = [r for r in waste.waste_by_team(date(2026, 11, 1), now=T0) if r.slug == "team-a"]
    assert (row.idle_now_gpus, row.idle_now_workloads) == (Decimal(3) * fraction, 1)
