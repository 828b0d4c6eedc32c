"""The usage pages in headless Chromium: the charts draw (Chart.js from the portal's static
files, no CDN) and the numbers are there. Screenshots go where tests/portal/test_browser.py
puts them."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from metering import rollups, selectors
from metering.models import AllocationInterval, UsageSample
from scheduler.cluster.models import Cluster, Node
from tenants.services import grants as grant_services
from tests.portal.test_browser import SHOTS, csp_refusals, sign_in
from tests.tenants.factories import PlatformAdminFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def usage_world(world):
    admin = PlatformAdminFactory(username="pat")
    admin.set_password("pw")
    admin.save()
    now = timezone.now().replace(second=0, microsecond=0)
    cluster = Cluster.objects.create(name="local")
    Node.objects.create(
        cluster=cluster,
        name="a100",
        gpu_model="A100-80GB",
        gpu_count=4,
        ready=True,
        last_seen_at=now,
    )
    grant_services.grant_quota(
        actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=4
    )
    start = max(
        now - timedelta(hours=30),
        selectors.month_window_until(selectors.current_month(now), now).start,
    )
    AllocationInterval.objects.create(
        cluster=cluster,
        pod_uid="u1",
        namespace="ns",
        pod_name="idle-notebook",
        node_name="a100",
        tenant=world.tenant,
        resource_class=world.rc,
        resource_name=world.rc.resource_name,
        gpu_model="A100-80GB",
        units=2,
        started_at=start,
        last_seen_at=now,
        util_sum=Decimal("0.3"),
        util_samples=3,
    )
    samples = []
    for minute in range(30 * 60):  # every minute for 30 hours, a daily rhythm
        at = now - timedelta(minutes=minute)
        used = Decimal("0.2") if at.hour < 8 else Decimal("1.4")
        samples.append(
            UsageSample(
                at=at,
                tenant=world.tenant,
                resource_class=world.rc,
                allocated=2,
                known=2,
                used=used,
                quota=4,
            )
        )
    UsageSample.objects.bulk_create(samples)
    rollups.roll_up_hours()
    rollups.roll_up_days()
    return admin


def test_team_and_platform_usage_pages_draw_their_charts(live_server, browser, world, usage_world):  # noqa: F811
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    refused = csp_refusals(page)  # the charts draw under the Content-Security-Policy
    sign_in(page, live_server.url, "pat")
    page.goto(f"{live_server.url}/usage/teams/{world.tenant.slug}/?tz=Europe/Berlin")
    page.wait_for_function(
        "() => typeof Chart !== 'undefined' && "
        "Chart.getChart(document.querySelector('canvas.usage-chart'))"
    )
    assert "idle-notebook" in page.content()  # holds 2 units at 10 % use
    statement = selectors.tenant_statement(world.tenant, selectors.current_month())
    assert str(statement.total) in page.content()
    page.screenshot(path=SHOTS / "team-usage.png", full_page=True)
    page.goto(f"{live_server.url}/usage/platform/?days=30")
    page.wait_for_function(
        "() => typeof Chart !== 'undefined' && "
        "Chart.getChart(document.querySelector('canvas.model-chart')) && "
        "Chart.getChart(document.getElementById('cost-chart'))"
    )
    assert "really used" in page.content()
    page.screenshot(path=SHOTS / "platform-usage.png", full_page=True)
    assert refused == []
