"""The admin sees money and holders in the console (issue 49, 8): the approval queue shows each
ask beside its team's budget this month (spent, left) and flags an ask that costs more in a
month than is left, reading every shown team's budget in one batch; the capacity map links a
held block to what holds it (the workload, or the team) and names the namespace of a GPU used
outside the portal."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from metering import services as metering_services
from metering.models import AllocationInterval
from metering.selectors import budget_left, budgets_left, current_month
from scheduler.cluster.models import Cluster
from tests.portal.test_browser_ux import (  # noqa: F401 (fixture)
    DESKTOP,
    PHONE,
    assert_accessible,
    no_sideways_scroll,
    pending,
    people,
    sign_in,
)
from tests.tenants.factories import TenantFactory


def spend(world, tenant, hours=3):
    """`tenant`'s pods held one unit for the last `hours` (within this month)."""
    now = timezone.now()
    AllocationInterval.objects.create(
        cluster=Cluster.objects.get_or_create(name="local")[0],
        pod_uid=f"u-{tenant.slug}",
        namespace=tenant.slug,
        pod_name="held",
        node_name="a100",
        tenant=tenant,
        resource_class=world.rc,
        resource_name=world.rc.resource_name,
        gpu_model="A100-80GB",
        units=1,
        started_at=max(now - timedelta(hours=hours), now.replace(day=1, hour=0, minute=0)),
        last_seen_at=now,
    )


def set_budget(world, tenant, amount):
    metering_services.set_budget(
        actor=world.admin, tenant=tenant, month=current_month(), amount=amount
    )


# --- (1) the queue's budgets ---------------------------------------------------------------------


@pytest.mark.django_db
def test_budgets_left_in_one_batch_says_what_budget_left_says_for_each(world):
    spend(world, world.tenant)
    set_budget(world, world.tenant, "500")
    no_budget = TenantFactory(slug="team-c")
    batch = budgets_left([world.tenant.pk, world.other_tenant.pk, no_budget.pk])
    assert set(batch) == {world.tenant.pk}  # a team with no budget is absent, as None is
    assert batch[world.tenant.pk] == budget_left(world.tenant)
    assert batch[world.tenant.pk]["spent"] > 0
    assert budgets_left([]) == {}


@pytest.mark.django_db
def test_budgets_left_reads_a_fixed_number_of_queries_however_many_teams(world):
    def queries(tenant_ids):
        with CaptureQueriesContext(connection) as seen:
            budgets_left(tenant_ids)
        return len(seen)

    set_budget(world, world.tenant, "500")
    spend(world, world.tenant)
    one = queries([world.tenant.pk])
    many = []
    for n in range(6):
        tenant = TenantFactory(slug=f"many-{n}")
        set_budget(world, tenant, "100")
        spend(world, tenant)
        many.append(tenant.pk)
    assert queries([world.tenant.pk, *many]) == one <= 8


@pytest.mark.django_db
def test_the_queue_flags_an_ask_dearer_in_a_month_than_the_budget_left(world):
    set_budget(world, world.tenant, "500")
    set_budget(world, world.other_tenant, "100000")
    dear = pending(world, world.tenant, amount=1, why="a week at 1.50 an hour")  # $252 in all
    open_ended = pending(world, world.tenant, amount=1, why="no end")  # $1095 a month
    cheap = pending(world, world.other_tenant, amount=1, why="well within")
    open_ended.ends_at = None
    open_ended.save()
    client = Client()
    client.force_login(world.admin)
    response = client.get(reverse("console:queue"))
    rows = {row.request.pk: row for row in response.context["page"].object_list}
    assert rows[dear.pk].budget["left"] == Decimal("500")
    assert rows[dear.pk].month_cost == Decimal("252.00")  # a week costs a week, not a month
    assert not rows[dear.pk].over_budget
    assert rows[open_ended.pk].month_cost == Decimal("1095.00")
    assert rows[open_ended.pk].over_budget
    assert not rows[cheap.pk].over_budget
    body = response.content.decode()
    flagged = body[body.index(f'id="budget-{open_ended.pk}"') :]
    assert flagged.split("</td>")[0].count("Over budget") == 1
    assert "Over budget" not in body[body.index(f'id="budget-{dear.pk}"') :].split("</td>")[0]


@pytest.mark.django_db
def test_the_queue_reads_budgets_in_a_fixed_number_of_queries(world):
    client = Client()
    client.force_login(world.admin)

    def queries():
        with CaptureQueriesContext(connection) as seen:
            assert client.get(reverse("console:queue")).status_code == 200
        return len(seen)

    set_budget(world, world.tenant, "500")
    spend(world, world.tenant)
    pending(world, world.tenant)
    few = queries()
    for n in range(8):  # more asks, of more teams, each with a budget and a spend
        tenant = TenantFactory(slug=f"busy-{n}")
        set_budget(world, tenant, "300")
        spend(world, tenant)
        pending(world, tenant)
        pending(world, world.tenant, why=f"more {n}")
    assert queries() == few


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_an_admin_reads_each_ask_against_its_teams_budget(live_server, browser, people, viewport):  # noqa: F811
    set_budget(people, people.tenant, "500")
    within = pending(people, people.tenant, amount=1, why="a week")  # $252 in all
    over = pending(people, people.tenant, amount=3, why="three for a week")  # $756
    none_set = pending(people, people.other_tenant, amount=1, why="no budget")
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/console/")
    expect(page.locator(f"#budget-{within.pk}")).to_contain_text("500.00")
    expect(page.locator(f"#budget-{within.pk}")).to_contain_text("left")
    expect(page.locator(f"#budget-{within.pk}")).not_to_contain_text("Over budget")
    expect(page.locator(f"#budget-{over.pk}")).to_contain_text("Over budget")
    expect(page.locator(f"#budget-{over.pk}")).to_contain_text("0.00 spent")
    expect(page.locator(f"#budget-{none_set.pk}")).to_contain_text("none set")
    assert_accessible(page)
    assert no_sideways_scroll(page)


# --- (2) the capacity map's holders --------------------------------------------------------------


def held_fleet(world):
    """One A100 node (the seed's mixed layout): a team's pod of a known workload, a team's pod
    the portal did not make, and a pod of a namespace outside the portal."""
    from tests.portal.test_browser_ux import running_workload
    from tests.scheduler.factories import NodeFactory, PodAllocationFactory

    node = NodeFactory(name="gpu-a100-0")
    workload = running_workload(world, name="train-7")
    mine = PodAllocationFactory(
        cluster=node.cluster,
        node_name=node.name,
        tenant=world.tenant,
        namespace=world.tenant.namespace,
        resources={"nvidia.com/mig-3g.40gb": 1},
    )
    AllocationInterval.objects.create(
        cluster=node.cluster,
        pod_uid=mine.uid,
        namespace=mine.namespace,
        pod_name=mine.pod_name,
        node_name=node.name,
        tenant=world.tenant,
        resource_class=world.rc,
        workload=workload,
        resource_name="nvidia.com/mig-3g.40gb",
        gpu_model="A100-80GB",
        units=1,
        started_at=timezone.now() - timedelta(minutes=5),
        last_seen_at=timezone.now(),
    )
    PodAllocationFactory(  # kubectl-made: no workload label, so no interval names one
        cluster=node.cluster,
        node_name=node.name,
        tenant=world.tenant,
        namespace=world.tenant.namespace,
        resources={"nvidia.com/mig-1g.10gb": 1},
    )
    PodAllocationFactory(
        cluster=node.cluster,
        node_name=node.name,
        tenant=None,
        namespace="ml-serving",
        resources={"nvidia.com/gpu": 1},
    )
    return workload


@pytest.mark.django_db
def test_held_blocks_link_to_the_workload_or_the_team_and_name_an_outside_namespace(world):
    workload = held_fleet(world)
    client = Client()
    client.force_login(world.admin)
    body = client.get(reverse("console:capacity")).content.decode()
    workload_url = reverse("scheduler:workload_detail", args=[workload.pk])
    assert body.count(f'<a href="{workload_url}"') == 1
    assert 'aria-label="GPU 0, 3g.40gb: workload train-7"' in body
    assert body.count(f'<a href="{reverse("team_detail", args=["team-a"])}" aria-label') == 1
    assert "namespace ml-serving (used outside the portal)" in body  # its block's title
    assert "used outside the portal by namespace ml-serving" in body  # the map's label
    assert 'role="group"' in body  # links inside: not an image whose children are not read


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_an_admin_follows_a_held_block_to_what_holds_it(live_server, browser, people, viewport):  # noqa: F811
    workload = held_fleet(people)
    page = browser.new_page(viewport=viewport)
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/console/capacity/")
    outside = page.locator("svg.map g.block.outside")
    expect(outside).to_have_count(1)
    expect(outside.locator("title")).to_contain_text("namespace ml-serving")
    expect(page.get_by_role("link", name="team team-a")).to_have_count(1)
    assert_accessible(page)
    assert no_sideways_scroll(page)
    page.get_by_role("link", name="workload train-7").click()
    expect(page).to_have_url(f"{live_server.url}/workloads/{workload.pk}/")
    expect(page.get_by_role("heading", level=1)).to_contain_text("train-7")
