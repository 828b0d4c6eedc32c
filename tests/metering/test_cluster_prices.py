"""Per-cluster prices (issue 54): a pod's time is priced with the factor of the cluster it ran
on, a grant's with the factor of where it places its work; a single cluster (factor 1) gives
the same figures as before, to the cent."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from metering import cluster_prices, fleet_cost, pricing, selectors
from metering.models import AllocationInterval
from scheduler.cluster import fleet
from scheduler.cluster.models import Cluster, Node
from tenants.models import QuotaGrant

NOV = date(2026, 11, 1)
ONE, TWO = Decimal(1), Decimal(2)


def t(*args):
    return datetime(*args, tzinfo=UTC)


# --- pure -----------------------------------------------------------------------------------------


def test_a_span_costs_its_factor_times_the_list_price():
    window = pricing.Window(t(2026, 11, 1), t(2026, 12, 1))
    schedule = pricing.PriceSchedule(Decimal("2.50"))
    home = pricing.Span(t(2026, 11, 2), t(2026, 11, 2, 4), 2)
    cloud = pricing.Span(t(2026, 11, 2), t(2026, 11, 2, 4), 2, Decimal("1.5"))
    assert pricing.cost([home], schedule, window) == Decimal("20.00")
    assert pricing.cost([cloud], schedule, window) == Decimal("30.00")
    assert pricing.cost([home, cloud], schedule, window) == Decimal("50.00")
    # a price change inside the span: each piece at its price, times the factor
    changed = pricing.PriceSchedule(Decimal("2.50"), ((t(2026, 11, 2, 2), Decimal("5")),))
    assert pricing.cost([cloud], changed, window) == Decimal("45.00")  # (2×2×2.5 + 2×2×5) × 1.5


def test_spans_on_clusters_of_different_prices_are_not_merged():
    a = pricing.Span(t(2026, 11, 1), t(2026, 11, 2), 1)
    b = pricing.Span(t(2026, 11, 1, 12), t(2026, 11, 3), 1, TWO)
    assert pricing.merge_spans([a, b]) == [a, b]
    c = pricing.Span(t(2026, 11, 1, 12), t(2026, 11, 3), 1)
    assert pricing.merge_spans([a, c]) == [pricing.Span(t(2026, 11, 1), t(2026, 11, 3), 1)]


def test_a_grants_factor_is_where_it_places_its_work():
    factors = {"local": Decimal("1.2"), "east": TWO}
    assert cluster_prices.placement_factor("", factors, "local") == Decimal("1.2")
    assert cluster_prices.placement_factor("cluster:east", factors, "local") == TWO
    assert cluster_prices.placement_factor("cluster:gone", factors, "local") == ONE
    assert cluster_prices.placement_factor("group:gpu", factors, "local") == ONE  # list price
    assert cluster_prices.placement_factor("", {}, "local") == ONE  # no row yet


# --- statements, workload costs, the fleet's cost -------------------------------------------------


@pytest.fixture
def clusters(world):
    local = fleet.update_cluster(
        actor=world.admin, cluster=Cluster.objects.create(name="local"), role="manager"
    )
    east = fleet.register_cluster(
        actor=world.admin, name="east", credentials_secret_name="east-kc", price_factor="2"
    )
    return local, east


@pytest.fixture
def at_list_price(world, clusters):
    local, east = clusters
    return local, fleet.update_cluster(actor=world.admin, cluster=east, price_factor="1")


def interval(world, cluster, uid, start, end, units=1, workload=None):
    return AllocationInterval.objects.create(
        cluster=cluster,
        pod_uid=uid,
        namespace="tenant-team-a",
        pod_name=uid,
        node_name="gpu-0",
        tenant=world.tenant,
        resource_class=world.rc,
        resource_name=world.rc.resource_name,
        units=units,
        started_at=start,
        last_seen_at=end,
        ended_at=end,
        workload=workload,
    )


@pytest.mark.django_db
def test_a_statement_prices_each_pods_time_with_its_clusters_factor(world, clusters):
    local, east = clusters
    interval(world, local, "home", t(2026, 11, 3), t(2026, 11, 3, 2), units=2)
    alone = selectors.tenant_statement(world.tenant, NOV, basis="allocation", now=t(2026, 12, 2))
    interval(world, east, "cloud", t(2026, 11, 3), t(2026, 11, 3, 2), units=2)
    both = selectors.tenant_statement(world.tenant, NOV, basis="allocation", now=t(2026, 12, 2))
    (line,) = both.lines
    assert line.allocated_hours == Decimal("8.0000")  # hours are hours, wherever
    # the worker's 4 unit-hours cost twice the list price
    assert line.allocated_cost == alone.lines[0].allocated_cost * 3
    # the same pod uid on two clusters is two pods (intervals are keyed by cluster)
    assert AllocationInterval.objects.count() == 2


@pytest.mark.django_db
def test_a_single_cluster_is_priced_as_before(world):
    """No fleet, no factor: the figures of tests/metering/test_services.py's first test."""
    local = Cluster.objects.create(name="local")
    interval(world, local, "u", t(2026, 11, 3), t(2026, 11, 3, 2), units=2)
    statement = selectors.tenant_statement(
        world.tenant, NOV, basis="allocation", now=t(2026, 12, 2)
    )
    price = world.rc.price_per_hour
    assert statement.lines[0].allocated_cost == pricing.money(price * 4)


@pytest.mark.django_db
def test_a_grant_on_a_named_worker_is_priced_with_its_factor(world, clusters):
    for placement in ("", "cluster:east", "group:gpu"):
        QuotaGrant.objects.create(
            tenant=world.tenant,
            resource_class=world.rc,
            amount=1,
            starts_at=t(2026, 11, 1),
            ends_at=t(2026, 11, 2),
            placement=placement,
        )
    statement = selectors.tenant_statement(world.tenant, NOV, basis="quota", now=t(2026, 12, 2))
    day = pricing.money(world.rc.price_per_hour * 24)
    assert statement.lines[0].quota_cost == day + 2 * day + day  # home, east ×2, group at list


@pytest.mark.django_db
def test_a_changed_factor_prices_the_clusters_time_with_the_new_one(world, clusters):
    """The factor in force is the cluster's now (a price rule per class keeps its history; a
    factor is the platform's statement of what a cluster costs)."""
    _, east = clusters
    interval(world, east, "cloud", t(2026, 11, 3), t(2026, 11, 3, 1))
    before = selectors.tenant_statement(world.tenant, NOV, basis="allocation", now=t(2026, 12, 2))
    fleet.update_cluster(actor=world.admin, cluster=east, price_factor="3")
    after = selectors.tenant_statement(world.tenant, NOV, basis="allocation", now=t(2026, 12, 2))
    assert after.total * 2 == before.total * 3


@pytest.mark.django_db
def test_the_fleets_cost_counts_a_workers_gpus_at_its_price(world, at_list_price):
    local, east = at_list_price
    seen = t(2026, 10, 1)
    for cluster in (local, east):
        Node.objects.create(
            cluster=cluster,
            name="gpu-0",  # the same name on both: two nodes
            gpu_model=world.rc.gpu_model,
            gpu_count=1,
            last_seen_at=seen,
        )
    Node.objects.filter(cluster=local).update(first_seen_at=seen)
    Node.objects.filter(cluster=east).update(first_seen_at=seen)
    at_list = fleet_cost.fleet_cost(NOV, now=t(2026, 11, 2), statements={})
    assert at_list.by_model[0][1] == 2  # GPUs: one on each cluster
    fleet.update_cluster(actor=world.admin, cluster=east, price_factor="2")
    dearer = fleet_cost.fleet_cost(NOV, now=t(2026, 11, 2), statements={})
    assert at_list.total.fleet > 0
    # local's GPU at the list price, east's at twice it: 3/2 of the fleet at the list price
    assert abs(dearer.total.fleet * 2 - at_list.total.fleet * 3) <= Decimal("0.02")
