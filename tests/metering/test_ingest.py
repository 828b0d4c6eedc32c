"""Ingest, samples and rollups on prepared pod lists: restarts, preemption, re-seen pods."""

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from metering import ingest, rollups
from metering.models import AllocationInterval, UsageRollup, UsageSample
from scheduler.cluster.models import Cluster, Node
from tenants.services import grants as grant_services
from tests.metering.helpers import pod, tenant_namespace

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)


@pytest.fixture
def cluster(world):
    cluster = Cluster.objects.create(name="local")
    Node.objects.create(
        cluster=cluster,
        name="a100-node",
        gpu_model="A100-80GB",
        gpu_product="NVIDIA-A100-SXM4-80GB",
        sharing_strategy="none",
        last_seen_at=T0,
    )
    reading = Reading(namespaces=[tenant_namespace("meter-team-a", "team-a")])
    # The quota is granted an hour before the first reading, whatever day the suite runs.
    with time_machine.travel(T0 - timedelta(hours=1), tick=False):
        grant_services.grant_quota(
            actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=3
        )
    return reading


@dataclass
class Reading:
    """What one reading of the cluster saw; tests change its pods between minutes."""

    namespaces: list[dict]
    pods: list[dict] = field(default_factory=list)


def run(reading, minute, **kw):
    return ingest.record_snapshot(
        pods=reading.pods,
        namespaces=reading.namespaces,
        list_nodes=list,  # every node is in the inventory
        now=T0 + timedelta(minutes=minute),
        prometheus_url="",
        **kw,
    )


def test_pods_open_continue_and_close_where_last_seen(cluster, world):
    reading = cluster
    reading.pods = [
        pod(
            "p1",
            "meter-team-a",
            uid="u1",
            node="a100-node",
            resources={"nvidia.com/mig-3g.40gb": 2},
            started=T0 - timedelta(minutes=30),
        ),
        pod(
            "other",
            "someone-else",
            uid="u2",
            node="a100-node",
            resources={"nvidia.com/gpu": 1},
            started=T0,
        ),
    ]
    first = run(reading, 0)
    assert (first.opened, first.closed, first.pods) == (2, 0, 2)
    mine = AllocationInterval.objects.get(pod_uid="u1")
    assert mine.tenant == world.tenant and mine.resource_class == world.rc and mine.units == 2
    assert mine.started_at == T0 - timedelta(minutes=30)  # from the pod, not from the ingest
    assert AllocationInterval.objects.get(pod_uid="u2").tenant is None  # not a tenant's
    # A worker restart: the next ingest a few minutes later just carries on.
    again = run(reading, 5)
    assert again.opened == 0 and AllocationInterval.objects.count() == 2
    mine = AllocationInterval.objects.with_seen_until().get(pod_uid="u1")
    assert mine.seen_until == T0 + timedelta(minutes=5) and mine.ended_at is None
    # The pod vanishes (deleted while nobody looked): closed at the last minute it was seen.
    reading.pods = reading.pods[1:]
    gone = run(reading, 9)
    mine.refresh_from_db()
    assert gone.closed == 1 and mine.ended_at == T0 + timedelta(minutes=5)
    assert mine.end_reason == AllocationInterval.EndReason.DELETED
    # Seen again (same uid): its interval continues, nothing is counted twice.
    reading.pods.append(
        pod(
            "p1",
            "meter-team-a",
            uid="u1",
            node="a100-node",
            resources={"nvidia.com/mig-3g.40gb": 2},
            started=T0 - timedelta(minutes=30),
        )
    )
    back = run(reading, 10)
    mine.refresh_from_db()
    assert back.reopened == 1 and mine.ended_at is None and AllocationInterval.objects.count() == 2


def test_preempted_and_finished_pods_close_at_their_finish_time(cluster, world):
    reading = cluster
    start = T0 - timedelta(hours=1)
    reading.pods = [
        pod(
            "victim",
            "meter-team-a",
            uid="v",
            node="a100-node",
            resources={"nvidia.com/mig-3g.40gb": 1},
            started=start,
        ),
        pod(
            "done",
            "meter-team-a",
            uid="d",
            node="a100-node",
            resources={"nvidia.com/mig-3g.40gb": 1},
            started=start,
        ),
    ]
    run(reading, 0)
    reading.pods = [
        pod(
            "victim",
            "meter-team-a",
            uid="v",
            node="a100-node",
            resources={"nvidia.com/mig-3g.40gb": 1},
            started=start,
            phase="Failed",
            finished=T0 + timedelta(seconds=42),
            preempted=True,
        ),
        pod(
            "done",
            "meter-team-a",
            uid="d",
            node="a100-node",
            resources={"nvidia.com/mig-3g.40gb": 1},
            started=start,
            phase="Succeeded",
            finished=T0 + timedelta(seconds=20),
        ),
    ]
    result = run(reading, 3)
    assert result.closed == 2
    victim = AllocationInterval.objects.get(pod_uid="v")
    assert victim.ended_at == T0 + timedelta(seconds=42)
    assert victim.end_reason == AllocationInterval.EndReason.PREEMPTED
    done = AllocationInterval.objects.get(pod_uid="d")
    assert (done.ended_at, done.end_reason) == (T0 + timedelta(seconds=20), "succeeded")


def test_samples_roll_up_hourly_and_daily_and_raw_samples_expire(cluster, world, settings):
    reading = cluster
    reading.pods = [
        pod(
            "p",
            "meter-team-a",
            uid="u",
            node="a100-node",
            resources={"nvidia.com/mig-3g.40gb": 2},
            started=T0,
        )
    ]
    for minute in range(90):  # 22:00 to 23:29
        run(reading, minute)
    run(reading, 89)  # twice in one minute: no change
    assert UsageSample.objects.count() == 90
    sample = UsageSample.objects.get(at=T0)
    assert (sample.allocated, sample.quota, sample.known) == (2, 3, 0)
    now = T0 + timedelta(minutes=90)
    assert rollups.roll_up_hours(now) == 2
    assert rollups.roll_up_hours(now) == 1  # again from the watermark: only the last hour
    hours = {r.start: r for r in UsageRollup.objects.filter(period="hour")}
    assert hours[T0].allocated_hours == Decimal(2) and hours[T0].quota_hours == Decimal(3)
    assert hours[T0 + timedelta(hours=1)].allocated_hours == Decimal(1)  # 30 minutes × 2
    assert rollups.roll_up_days(now) == 1
    day = UsageRollup.objects.get(period="day")
    assert day.allocated_hours == Decimal(3) and day.gpu_model == "A100-80GB"
    settings.RAW_SAMPLE_RETENTION_DAYS = 1
    assert rollups.purge_samples(now + timedelta(days=1)) == 60  # the first hour only
    assert rollups.purge_samples(now + timedelta(days=1)) == 0


def test_class_slug_follows_the_node():
    from metering.ingest import NodeFacts, class_slug

    assert class_slug(NodeFacts("A100-80GB", "none", ""), "nvidia.com/gpu") == "a100-80gb"
    assert class_slug(NodeFacts("A100-80GB", "none", ""), "nvidia.com/mig-1g.10gb") == (
        "a100-80gb-mig-1g.10gb"
    )
    assert class_slug(NodeFacts("L40S-48GB", "time-slicing", ""), "nvidia.com/gpu") == (
        "l40s-48gb-shared"
    )
    assert class_slug(NodeFacts("", "none", ""), "nvidia.com/gpu") is None
    assert class_slug(None, "nvidia.com/gpu") is None


def test_platform_headline_is_the_share_of_capacity_allocated_and_used(world):
    from metering import selectors
    from metering.models import ModelRollup

    cluster = Cluster.objects.create(name="local")
    Node.objects.create(
        cluster=cluster, name="a", gpu_model="A100-80GB", gpu_count=4, ready=True, last_seen_at=T0
    )
    day = T0.replace(hour=0)
    ModelRollup.objects.create(
        start=day,
        gpu_model="A100-80GB",
        allocated_gpu_hours=48,
        known_gpu_hours=40,
        used_gpu_hours=24,
    )
    data = selectors.platform_series(days=30, now=day + timedelta(hours=24))
    assert data["allocated_share"] == Decimal(50) and data["used_share"] == Decimal(25)
    assert data["idle_gpu_hours"] == Decimal(16)
    assert data["series"]["A100-80GB"] == {"t": ["2026-11-30"], "allocated": [50.0], "used": [25.0]}


def test_a_prometheus_outage_keeps_allocation_and_marks_use_unknown(cluster, world):
    """Allocation needs only the API server: it is recorded for the minute; utilisation is
    unknown (no `known` units), and the result says why."""
    reading = cluster
    reading.pods = [
        pod(
            "p1",
            "meter-team-a",
            uid="u1",
            node="a100-node",
            resources={"nvidia.com/mig-3g.40gb": 2},
            started=T0 - timedelta(minutes=5),
        )
    ]
    result = ingest.record_snapshot(
        pods=reading.pods,
        namespaces=reading.namespaces,
        list_nodes=list,
        now=T0,
        prometheus_url="http://127.0.0.1:9",  # nothing listens: connection refused
    )
    assert result.opened == 1 and result.samples == 1
    assert "Prometheus at http://127.0.0.1:9" in result.utilisation_error
    sample = UsageSample.objects.get()
    assert (sample.allocated, sample.known, sample.used) == (Decimal(2), Decimal(0), Decimal(0))


def test_dcgm_label_names_are_settings(settings):
    """A ServiceMonitor without honorLabels renames the exporter's labels to exported_*."""
    from metering import prometheus

    settings.DCGM_NAMESPACE_LABEL = "exported_namespace"
    settings.DCGM_POD_LABEL = "exported_pod"
    queries = prometheus.queries("2m")
    assert all("by (exported_namespace, exported_pod)" in q for q in queries.values())
    row = {"metric": {"exported_namespace": "ns", "exported_pod": "p"}, "value": [0, "0.5"]}
    assert prometheus.pod_key(row) == ("ns", "p")


def test_minutes_missed_in_an_outage_are_filled_from_the_intervals(cluster, world):
    reading = cluster
    three_g = {"nvidia.com/mig-3g.40gb": 2}
    reading.pods = [
        pod("p1", "meter-team-a", uid="u1", node="a100-node", resources=three_g, started=T0)
    ]
    run(reading, 0)
    # The database (or the worker) is down for minutes 1-3; a pod starts at minute 2 meanwhile.
    reading.pods.append(
        pod(
            "p2",
            "meter-team-a",
            uid="u2",
            node="a100-node",
            resources={"nvidia.com/mig-3g.40gb": 1},
            started=T0 + timedelta(minutes=2, seconds=10),
        )
    )
    back = run(reading, 4)
    assert back.backfilled == 3
    samples = {
        int((s.at - T0).total_seconds() // 60): s
        for s in UsageSample.objects.filter(tenant=world.tenant, resource_class=world.rc)
    }
    assert sorted(samples) == [0, 1, 2, 3, 4]  # no gap
    allocated = {m: samples[m].allocated for m in samples}
    # p2 counts from the first whole minute it held its slice
    assert allocated == {0: 2, 1: 2, 2: 2, 3: 3, 4: 3}
    assert samples[2].known == 0 and samples[2].quota == 3  # use unknown, quota known
    # a minute that has its own sample keeps it; a second run changes nothing
    assert run(reading, 4).backfilled == 0
    assert UsageSample.objects.filter(tenant=world.tenant).count() == 5


def test_a_gap_is_filled_with_the_quota_of_each_minute_in_queries_that_do_not_grow_with_it(
    cluster, world
):
    """A long outage costs the same queries to fill as a short one (it runs under the ingest
    lock), and each missed minute still gets the quota in force then."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.tenants.factories import QuotaGrantFactory

    QuotaGrantFactory(  # two more slices, ending in the middle of the long gap
        tenant=world.tenant,
        resource_class=world.rc,
        amount=2,
        starts_at=T0 - timedelta(hours=1),
        ends_at=T0 + timedelta(minutes=20),
    )
    run(cluster, 0)
    with CaptureQueriesContext(connection) as short:
        assert run(cluster, 4).backfilled == 3
    with CaptureQueriesContext(connection) as long:
        assert run(cluster, 44).backfilled == 39
    assert len(long) == len(short)
    quota = {
        int((s.at - T0).total_seconds() // 60): s.quota
        for s in UsageSample.objects.filter(tenant=world.tenant, resource_class=world.rc)
    }
    assert (quota[1], quota[19], quota[20], quota[43]) == (5, 5, 3, 3)


def test_missed_minutes_are_whole_minutes_between_two_ingests_and_bounded():
    at = T0 + timedelta(minutes=10)
    assert ingest.missed_minutes(T0 + timedelta(minutes=9, seconds=30), at, 60) == []
    assert ingest.missed_minutes(T0 + timedelta(minutes=7, seconds=59), at, 60) == [
        T0 + timedelta(minutes=8),
        T0 + timedelta(minutes=9),
    ]
    assert ingest.missed_minutes(T0, at, 3) == [
        T0 + timedelta(minutes=7),
        T0 + timedelta(minutes=8),
        T0 + timedelta(minutes=9),
    ]


def test_a_fleets_minute_adds_up_every_clusters_pods_in_one_sample(cluster, world):
    """A team placed on a group of workers holds GPUs on two clusters in the same minute: each
    reading is recorded under its own cluster, and the minute's sample counts both."""
    worker = Cluster.objects.create(
        name="east", role="worker", credentials_secret_name="east-kubeconfig"
    )
    Node.objects.create(
        cluster=worker,
        name="a100-node",  # the same node name on another cluster: its own row
        gpu_model="A100-80GB",
        gpu_product="NVIDIA-A100-SXM4-80GB",
        sharing_strategy="none",
        last_seen_at=T0,
    )
    home = cluster
    home.pods = [pod("p1", "meter-team-a", uid="u1", node="a100-node",
                     resources={"nvidia.com/mig-3g.40gb": 1}, started=T0)]  # fmt: skip
    there = Reading(namespaces=home.namespaces)
    there.pods = [pod("p1", "meter-team-a", uid="u9", node="a100-node",
                      resources={"nvidia.com/mig-3g.40gb": 2}, started=T0)]  # fmt: skip
    results = [run(home, 0, samples=False), run(there, 0, cluster_name="east", samples=False)]
    assert not UsageSample.objects.exists()  # left to the caller
    ingest.write_samples_of(results)
    sample = UsageSample.objects.get(tenant=world.tenant)
    assert (sample.allocated, sample.quota) == (Decimal(3), Decimal(3))
    by_cluster = dict(AllocationInterval.objects.values_list("pod_uid", "cluster__name"))
    assert by_cluster == {"u1": "local", "u9": "east"}
