"""Money that adds up (issue 34, item 2) and waste by team (issue 30, item 3): for a month with
grants, use, idle and an unallocated fleet, allocated-and-used + idle + unallocated = the fleet's
cost to the cent; the platform page, the roll-up by cost centre and its export agree with the
statements; the month-end forecast warns once before the budget is reached; the currency and
showback settings reach every figure. A fixed past month, every clock given: no test depends on
the day."""

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.core.checks import Error
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from metering import cost_rollups, fleet_cost, selectors, services, waste
from metering.models import AllocationInterval, BudgetAlert, UsageRollup
from portal import system_checks
from scheduler.cluster.models import Cluster, Node
from scheduler.workloads.lifecycle.suspending import IDLE_REASON
from scheduler.workloads.models import Workload, WorkloadEvent
from tenants.models import AuditEvent, Department
from tenants.notifications import deliver_due
from tests.scheduler.factories import WorkloadFactory
from tests.tenants.factories import ResourceClassFactory

pytestmark = pytest.mark.django_db

JUNE = date(2026, 6, 1)
T0 = datetime(2026, 6, 1, tzinfo=UTC)
AFTER = datetime(2026, 7, 1, 12, tzinfo=UTC)  # the month is over: its figures are final


@pytest.fixture
def month(world, settings):
    """June 2026: a node of 2 A100s all month (2 × 720 h × 2.00 = 2880.00). team-a held a whole
    GPU for 240 h (480.00), 16 of its observed hours idle (32.00); team-b held 2 MIG 3g slices
    for 100 h (2 × 100 × 1.50 = 300.00)."""
    settings.BILLING_TIME_ZONE = "UTC"
    whole = ResourceClassFactory(
        slug="a100-80gb",
        kind="whole",
        profile="",
        resource_name="nvidia.com/gpu",
        gpu_fraction=Decimal(1),
        memory_gb=80,
        price_per_hour=Decimal("2.00"),
    )
    cluster = Cluster.objects.create(name="local")
    node = Node.objects.create(
        cluster=cluster, name="gpu-1", gpu_model="A100-80GB", gpu_count=2, last_seen_at=T0
    )
    Node.objects.filter(pk=node.pk).update(first_seen_at=T0 - timedelta(days=12))

    def held(tenant, rc, units, hours, uid):
        AllocationInterval.objects.create(
            cluster=cluster,
            pod_uid=uid,
            namespace=tenant.namespace,
            pod_name=uid,
            node_name="gpu-1",
            tenant=tenant,
            resource_class=rc,
            resource_name=rc.resource_name,
            units=units,
            started_at=T0,
            last_seen_at=T0 + timedelta(hours=hours),
            ended_at=T0 + timedelta(hours=hours),
        )

    held(world.tenant, whole, 1, 240, "pod-a")
    held(world.other_tenant, world.rc, 2, 100, "pod-b")
    for hour, known, used in ((0, "10", "4"), (1, "10", "0")):
        UsageRollup.objects.create(
            period=UsageRollup.Period.HOUR,
            start=T0 + timedelta(hours=hour),
            tenant=world.tenant,
            resource_class=whole,
            gpu_model="A100-80GB",
            allocated_hours=Decimal(known),
            known_hours=Decimal(known),
            used_hours=Decimal(used),
        )
    world.tenant.cost_centre = "CC-100"
    world.tenant.save(update_fields=["cost_centre"])
    world.other_tenant.cost_centre = "=HYPERLINK(1)"
    world.other_tenant.save(update_fields=["cost_centre"])
    return whole


def test_used_idle_and_unallocated_add_up_to_the_fleets_cost_to_the_cent(world, month):
    fleet = fleet_cost.fleet_cost(JUNE, now=AFTER)
    t = fleet.total
    assert (t.fleet, t.used, t.idle, t.unallocated, t.over) == (
        Decimal("2880.00"),
        Decimal("748.00"),
        Decimal("32.00"),
        Decimal("2100.00"),
        Decimal("0.00"),
    )
    assert t.used + t.idle + t.unallocated - t.over == t.fleet
    # allocated is what the teams' statements say, to the cent
    statements = selectors.month_statements(
        JUNE, [world.tenant.pk, world.other_tenant.pk], now=AFTER
    )
    assert t.allocated == sum(s.allocated_cost for s in statements.values())
    assert t.idle == sum(s.idle_cost for s in statements.values())
    assert [(model, gpus) for model, gpus, _ in fleet.by_model] == [("A100-80GB", 2)]


def test_a_class_billed_above_its_gpu_share_shows_as_over_and_still_adds_up(world, month):
    # the whole node, held by MIG slices priced at 3.50 per GPU-equivalent: over the fleet
    AllocationInterval.objects.filter(pod_uid="pod-b").update(
        units=7, last_seen_at=T0 + timedelta(hours=720), ended_at=T0 + timedelta(hours=720)
    )
    t = fleet_cost.fleet_cost(JUNE, now=AFTER).total
    assert t.unallocated == 0 and t.over > 0
    assert t.used + t.idle + t.unallocated - t.over == t.fleet


def test_waste_ranks_teams_by_idle_cost_with_what_idles_now_and_what_was_suspended(world, month):
    idle = WorkloadFactory(
        tenant=world.tenant,
        state=Workload.State.RUNNING,
        resources={"a100-80gb": 1},
        idle_since=T0,
    )
    WorkloadFactory(tenant=world.tenant, state=Workload.State.RUNNING, resources={"a100-80gb": 1})
    gone = WorkloadFactory(tenant=world.other_tenant, state=Workload.State.SUSPENDED)
    WorkloadEvent.objects.create(
        workload=gone, state="suspended", reason=IDLE_REASON, created_at=T0 + timedelta(days=3)
    )
    WorkloadEvent.objects.create(  # another month: not counted
        workload=gone, state="suspended", reason=IDLE_REASON, created_at=T0 - timedelta(days=3)
    )
    rows = waste.waste_by_team(JUNE, now=AFTER)
    assert [r.slug for r in rows] == ["team-a", "team-b"]
    a, b = rows
    assert (a.idle_gpu_hours, a.idle_cost, a.idle_pct) == (
        Decimal("16.00"),
        Decimal("32.00"),
        Decimal("80.0"),
    )
    assert (a.idle_now_gpus, a.idle_now_workloads, a.suspended) == (Decimal(1), 1, 0)
    assert (b.idle_cost, b.idle_pct, b.suspended) == (Decimal("0.00"), None, 1)
    assert idle.pk  # the idle one is the one counted: the busy one has no idle clock


def test_the_platform_page_shows_fleet_waste_and_cost_centres_in_the_currency(
    world, month, settings
):
    settings.BILLING_CURRENCY = "EUR"
    settings.BILLING_MODE = "showback"
    client = Client()
    client.force_login(world.admin)
    page = client.get("/usage/platform/?month=2026-06").content.decode()
    assert "Where the fleet's cost went, June 2026" in page
    assert "showback: reported to teams, not billed" in page
    for figure in ("2880.00", "748.00", "2100.00", "32.00 EUR", "CC-100"):
        assert figure in page, figure
    assert "Held but idle, by team" in page and "(allocation, EUR)" in page

    csv_text = client.get("/usage/platform/cost-centres.csv?month=2026-06").content.decode()
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    by_name = {r["cost_centre"]: r for r in rows}
    assert by_name["CC-100"]["total"] == "480.00" and by_name["CC-100"]["currency"] == "EUR"
    assert by_name["CC-100"]["mode"] == "showback" and by_name["CC-100"]["teams"] == "team-a"
    assert "'=HYPERLINK(1)" in by_name  # a cost centre typed as a formula stays text
    as_json = client.get("/usage/platform/cost-centres.json?month=2026-06").json()
    assert sorted(r["total"] for r in as_json) == ["300.00", "480.00"]

    statement = client.get(f"/usage/teams/{world.tenant.slug}/statement.json?month=2026-06")
    assert statement.json()["currency"] == "EUR" and statement.json()["mode"] == "showback"


def test_members_cannot_read_the_roll_up(world, month):
    client = Client()
    client.force_login(world.owner)
    assert client.get("/usage/platform/cost-centres.csv?month=2026-06").status_code in (403, 404)


def test_the_roll_up_sums_the_statements(world, month):
    rows = {r.name: r for r in cost_rollups.roll_up(JUNE, "cost_centre", now=AFTER)}
    assert rows["CC-100"].total == Decimal("480.00") and rows["CC-100"].teams == ["team-a"]
    assert rows["CC-100"].idle_cost == Decimal("32.00")
    assert rows["CC-100"].forecast == rows["CC-100"].total  # the month is over


def test_the_forecast_warns_once_before_the_budget_is_reached_and_not_too_early(
    world, month, django_capture_on_commit_callbacks
):
    world.tenant.monthly_budget = Decimal("1000")
    world.tenant.save(update_fields=["monthly_budget"])
    # 12 h in: 24.00 spent, a forecast of 1440.00 over 1000, but too early to trust the rate
    early = T0 + timedelta(hours=12)
    state = selectors.budget_state(world.tenant, early)
    assert (state.cost, state.forecast, state.forecast_over) == (
        Decimal("24.00"),
        Decimal("1440.00"),
        True,
    )
    assert services.warn_budgets(now=early) == []
    # a day in: 48.00 spent (under 80 %), forecast 1440.00: warned once, audited, told
    day = T0 + timedelta(hours=24)
    world.owner.email = "owner@example.com"
    world.owner.save()
    with django_capture_on_commit_callbacks(execute=True):
        (alert,) = services.warn_budgets(now=day)
    deliver_due()  # what the worker does with the queued delivery
    assert (alert.kind, alert.threshold, alert.cost) == (
        BudgetAlert.Kind.FORECAST,
        100,
        Decimal("48.00"),
    )
    assert AuditEvent.objects.filter(verb="budget.forecast_warned").count() == 1
    (message,) = mail.outbox
    assert "on course to pass its June 2026 budget" in message.subject
    assert "the month ends at 1440.00 USD, over its budget of 1000.00 USD" in message.body
    assert services.warn_budgets(now=day + timedelta(hours=1)) == []  # once a month


def test_bad_billing_settings_stop_the_portal(settings):
    assert system_checks.billing(None) == []
    settings.BILLING_CURRENCY = "usd"
    settings.BILLING_MODE = "invoice"
    settings.BILLING_BASIS = "vibes"
    errors = system_checks.billing(None)
    assert [e.id for e in errors] == ["portal.E010", "portal.E011", "portal.E012"]
    assert all(isinstance(e, Error) for e in errors)


def test_a_node_the_inventory_saw_late_counts_from_its_first_allocation(world, month):
    # the inventory was rebuilt mid-month: the node's pods prove it was there (and paid) before
    Node.objects.filter(name="gpu-1").update(first_seen_at=T0 + timedelta(days=20))
    assert fleet_cost.fleet_cost(JUNE, now=AFTER).total.fleet == Decimal("2880.00")
    AllocationInterval.objects.all().delete()  # nothing ran before: from when it was seen
    assert fleet_cost.fleet_cost(JUNE, now=AFTER).total.fleet == Decimal("960.00")  # 10 days


def test_departments_roll_up_with_their_own_budget_on_the_page_and_in_the_export(world, month):
    research = Department.objects.create(
        slug="research", name="Research", monthly_budget=Decimal("5000")
    )
    world.tenant.department = research
    world.tenant.monthly_budget = Decimal("700")
    world.tenant.save(update_fields=["department", "monthly_budget"])
    rows = {r.name: r for r in cost_rollups.roll_up(JUNE, "department", now=AFTER)}
    assert rows["research"].teams == ["team-a"] and rows["research"].total == Decimal("480.00")
    assert rows["research"].budget == Decimal("5000")  # the department's own, not its teams'
    assert rows[""].teams == ["team-b"]  # teams without a department: one row
    with pytest.raises(ValueError, match="roll up by one of"):
        cost_rollups.roll_up(JUNE, "colour", now=AFTER)

    client = Client()
    client.force_login(world.admin)
    page = client.get("/usage/platform/?month=2026-06").content.decode()
    assert "By department, June 2026" in page and "research" in page
    exported = client.get("/usage/platform/departments.json?month=2026-06").json()
    assert {r["department"]: r["total"] for r in exported} == {
        "research": "480.00",
        "": "300.00",
    }
    assert client.get("/usage/platform/colours.csv?month=2026-06").status_code == 404


def test_the_platform_page_prices_the_month_once(world, month):
    """The fleet split, the waste ranking and both roll-ups share one batch of statements:
    the grants a statement prices are read once, not once per table."""
    client = Client()
    client.force_login(world.admin)
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/usage/platform/?month=2026-06").status_code == 200
    grant_reads = [q["sql"] for q in queries if 'FROM "tenants_quotagrant"' in q["sql"]]
    assert len(grant_reads) == 1, grant_reads
