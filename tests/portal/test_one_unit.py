"""One unit everywhere (issue 49, 4): every number of GPUs a page says is "N × shape (= X of Y
slices)", from one pure function; "in use" is what runs (pods placed on nodes and running), not
work admitted on quota whose pods are not placed; the queue card and an over-quota refusal speak
the same words."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from catalog import slices
from catalog.models import ResourceClass
from scheduler.cluster.models import Cluster, Node, PodAllocation
from scheduler.workloads.models import Workload
from scheduler.workloads.selectors import usage_by_tenant
from tenants.selectors import quota_lines
from tests.portal.test_browser import csp_refusals, sign_in
from tests.portal.test_browser_ux import DESKTOP, PHONE, assert_accessible, no_sideways_scroll
from tests.scheduler.factories import WorkloadFactory
from tests.tenants.factories import PoolFactory, QuotaGrantFactory, ResourceClassFactory


def _rc(kind: str, profile: str = "", fraction: str = "1") -> ResourceClass:
    return ResourceClass(
        slug=f"a100-80gb-{kind}-{profile}",
        gpu_model="A100-80GB",
        kind=kind,
        profile=profile,
        resource_name="nvidia.com/gpu",
        gpu_fraction=Decimal(fraction),
        memory_gb=10,
    )


@pytest.mark.parametrize(
    ("units", "rc", "of", "words"),
    [
        (4, _rc("mig", "1g.10gb", "0.1429"), 14, "4 × 1g.10gb (= 4 of 14 slices)"),
        (1, _rc("mig", "3g.40gb", "0.4286"), 12, "1 × 3g.40gb (= 3 of 12 slices)"),
        (2, _rc("whole"), None, "2 × whole GPU (= 14 slices)"),
        (1, _rc("mig", "1g.10gb", "0.1429"), None, "1 × 1g.10gb (= 1 slice)"),
        (0, _rc("mig", "3g.40gb", "0.4286"), 1, "0 × 3g.40gb (= 0 of 1 slice)"),
    ],
)
def test_units_in_slices_is_the_one_format(units, rc, of, words):
    assert slices.units_in_slices(units, rc, of) == words


def test_slices_of_and_shape():
    assert slices.slices_of(3, 12) == "3 of 12 slices"
    assert slices.slices_of(1) == "1 slice"
    assert slices.shape(_rc("shared", fraction="0.25")) == "shared replica"


@pytest.fixture
def gang(world):
    """2 pods × 4 1g instances admitted on a grant of 14 1g; one pod runs, one is not placed."""
    one_g = ResourceClassFactory(
        slug="a100-80gb-mig-1g.10gb",
        gpu_model="A100-80GB",
        kind="mig",
        profile="1g.10gb",
        resource_name="nvidia.com/mig-1g.10gb",
        gpu_fraction=Decimal("0.1429"),
    )
    PoolFactory(resource_class=one_g, capacity=7)
    QuotaGrantFactory(tenant=world.tenant, resource_class=one_g, amount=14)
    WorkloadFactory(
        tenant=world.tenant,
        name="gang",
        resources={one_g.slug: 4},
        replicas=2,
        state=Workload.State.RUNNING,
        started_at=timezone.now() - timedelta(minutes=5),
    )
    WorkloadFactory(
        tenant=world.tenant, name="starting", resources={one_g.slug: 2}, state="pending"
    )
    return one_g


def _inventory(world, *, phases=("Running", "Pending")):
    cluster = Cluster.objects.create(name="local")
    Node.objects.create(
        cluster=cluster,
        name="a100",
        gpu_model="A100-80GB",
        gpu_product="NVIDIA-A100-SXM4-80GB",
        gpu_count=1,
        ready=True,
        last_seen_at=timezone.now(),
    )
    ns = f"tenant-{world.tenant.slug}"
    for i, phase in enumerate(phases):
        PodAllocation.objects.create(
            cluster=cluster,
            uid=f"u{i}",
            namespace=ns,
            pod_name=f"gang-{i}",
            node_name="a100",
            tenant=world.tenant,
            resources={"nvidia.com/mig-1g.10gb": 4},
            phase=phase,
            seen_at=timezone.now(),
        )


@pytest.mark.django_db
def test_without_an_inventory_in_use_is_the_running_workloads_not_the_admitted(world, gang):
    assert usage_by_tenant([world.tenant.pk])[1][world.tenant.pk] == {gang.slug: 8}
    (line,) = [x for x in quota_lines(world.tenant) if x.resource_class == gang]
    assert (line.granted, line.in_use, line.running, line.waiting_for_nodes) == (14, 10, 8, 2)


@pytest.mark.django_db
def test_with_an_inventory_in_use_is_the_pods_placed_and_running(world, gang):
    _inventory(world)
    assert usage_by_tenant([world.tenant.pk])[1][world.tenant.pk] == {gang.slug: 4}
    (line,) = [x for x in quota_lines(world.tenant) if x.resource_class == gang]
    assert (line.in_use, line.running, line.waiting_for_nodes) == (10, 4, 6)
    # never more in use than the pool of 7 slices has
    assert line.running_words == "4 × 1g.10gb (= 4 of 14 slices)"
    assert line.granted_words == "14 × 1g.10gb (= 14 of 14 slices)"
    assert line.free_words == "4 × 1g.10gb (= 4 of 14 slices)"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_team_and_home_pages_say_one_unit_and_in_use_is_what_runs(
    live_server, browser, world, gang, viewport
):
    _inventory(world)
    world.member.set_password("pw")
    world.member.save()
    page = browser.new_page(viewport=viewport)
    refused = csp_refusals(page)
    sign_in(page, live_server.url, "member")
    home = page.locator("section[aria-labelledby='team-team-a'] tbody tr", has_text="1g.10gb")
    expect(home.locator("td").nth(1)).to_have_text("14 × 1g.10gb (= 14 of 14 slices)")
    expect(home.locator("td").nth(2)).to_contain_text("4 × 1g.10gb (= 4 of 14 slices)")
    expect(home.locator("td").nth(2)).to_contain_text("+ 6 admitted, not running yet")
    pools = page.locator("#pools-table tbody tr", has_text="1g.10gb")
    expect(pools.locator("td").nth(1)).to_have_text("7 × 1g.10gb (= 7 slices)")
    expect(page.locator("#pools-note")).to_contain_text("Granted may exceed capacity")
    assert_accessible(page)
    page.goto(f"{live_server.url}/teams/team-a/")
    row = page.locator("table.quota tbody tr", has_text="1g.10gb")
    expect(row.locator("td").nth(1)).to_have_text("14 × 1g.10gb (= 14 of 14 slices)")
    expect(row.locator("td").nth(2)).to_contain_text("4 × 1g.10gb (= 4 of 14 slices)")
    expect(row.locator("td").nth(3)).to_have_text("4 × 1g.10gb (= 4 of 14 slices)")
    expect(page.locator("table.quota thead")).to_contain_text("In use (running)")
    assert_accessible(page)
    assert no_sideways_scroll(page) and refused == []
