"""End to end in headless Chromium (Debian's), against the live portal, a real Celery worker and
the local cluster: a member asks, a platform admin approves, the team page shows the quota in
sync; the capacity map draws the seed fleet. Screenshots go to .local/screenshots, or to
docs/screenshots with SAVE_SCREENSHOTS=1 (`make screenshots`)."""

import os
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker
from django.conf import settings
from playwright.sync_api import expect

from catalog.models import ResourceClass
from catalog.services import ensure_resource_classes
from portal.celery import app
from scheduler.cluster import inventory
from scheduler.cluster.models import TenantSyncState
from scheduler.cluster.reconcile.specs import tenant_namespace
from tenants.models import CapacityRequest, Membership
from tenants.services.grants import grant_quota
from tenants.services.tenants import create_tenant
from tests.scheduler.cluster_helpers import restricted_pod, wait_for
from tests.tenants.factories import MembershipFactory, PlatformAdminFactory, UserFactory

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

SHOTS = Path(settings.BASE_DIR) / (
    "docs/screenshots" if os.environ.get("SAVE_SCREENSHOTS") else ".local/screenshots"
)
SHOTS.mkdir(parents=True, exist_ok=True)  # every browser test may save what it saw


@pytest.fixture
def portal_world(kube, tenant_namespaces, settings):
    settings.RECONCILE_ON_COMMIT = True
    admin = PlatformAdminFactory(username="platform", first_name="Pat")
    admin.set_password("pw")
    admin.save()
    inventory.sync_inventory(kube)  # the seed fleet's pools, from the cluster
    ensure_resource_classes(["H100-80GB"])
    tenant = create_tenant(actor=admin, slug="vision", name="Vision team")
    tenant_namespaces.append(tenant_namespace(tenant))
    member = UserFactory(username="mia")
    member.set_password("pw")
    member.save()
    MembershipFactory(tenant=tenant, user=member, role=Membership.Role.OWNER)
    app.control.purge()
    with start_worker(
        app,
        pool="threads",
        concurrency=2,
        perform_ping_check=False,
        shutdown_timeout=30,
        queues=["reconcile"],
    ):
        yield admin, member, tenant


def csp_refusals(page) -> list[str]:
    """What the browser refuses for the Content-Security-Policy, as it logs it (filled while the
    page runs): a test asserts it stays empty."""
    refused: list[str] = []
    page.on(
        "console",
        lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None,
    )
    return refused


def sign_in(page, base, username):
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill("pw")
    page.get_by_role("button", name="Sign in").click()


def test_ask_approve_and_see_the_quota_in_sync(live_server, browser, portal_world, kube):
    admin, member, tenant = portal_world
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    refused = csp_refusals(page)  # htmx's live hint works under the policy

    sign_in(page, live_server.url, "mia")
    expect(page.get_by_role("heading", name="My teams")).to_be_visible()
    page.screenshot(path=SHOTS / "my-teams.png", full_page=True)
    page.goto(f"{live_server.url}/teams/vision/ask/")
    page.get_by_label("GPU model and profile").select_option(
        label="H100-80GB MIG 3g.40gb · 40 GB · $1.93/h"
    )
    page.get_by_label("How many units", exact=False).or_(page.locator("#id_amount")).first.fill("2")
    page.locator("#id_justification").fill("Fine-tune the vision model")
    expect(page.locator("#hint")).to_contain_text("free in the pool")
    expect(page.locator("#hint")).to_contain_text("Goes to the platform team")
    expect(page.locator("#hint")).to_contain_text("2 × H100-80GB")  # htmx's update, not the first
    page.screenshot(path=SHOTS / "ask-for-capacity.png", full_page=True)
    page.get_by_role("button", name="Send request").click()
    expect(page.get_by_text("Sent to the platform team for approval.")).to_be_visible()
    request = CapacityRequest.objects.get(tenant=tenant)

    admin_page = browser.new_page(viewport={"width": 1280, "height": 900})
    admin_refused = csp_refusals(admin_page)
    sign_in(admin_page, live_server.url, "platform")
    admin_page.goto(f"{live_server.url}/console/")
    admin_page.get_by_label(f"Select request {request.pk}").check()
    admin_page.get_by_label("Comment (required to reject)").fill("Enjoy")
    admin_page.screenshot(path=SHOTS / "console-approvals.png", full_page=True)
    admin_page.get_by_role("button", name="Approve selected").click()
    expect(admin_page.get_by_text("Approved 1 request.")).to_be_visible()
    assert refused == [] and admin_refused == []

    ns = tenant_namespace(tenant)
    wait_for(
        "quota on the cluster",
        lambda: (
            (kube.get("ResourceQuota", "gpu-portal-quota", ns) or {})
            .get("spec", {})
            .get("hard", {})
            .get("requests.nvidia.com/mig-3g.40gb")
            == "2"
        ),
        timeout=60,
    )
    # The worker applies the quota before it records the run: the page shows the record.
    wait_for(
        "the reconcile recorded in sync",
        lambda: TenantSyncState.objects.filter(
            tenant=tenant, status=TenantSyncState.Status.IN_SYNC
        ).exists(),
        timeout=30,
    )
    page.goto(f"{live_server.url}/teams/vision/")
    expect(page.locator(".badge.sync-in_sync")).to_have_text("in sync")
    expect(page.locator("table.quota")).to_contain_text("H100-80GB MIG 3g.40gb")
    expect(page.locator("table.quota td.num").first).to_have_text("2 × 3g.40gb (= 6 of 6 slices)")
    page.screenshot(path=SHOTS / "team-page.png", full_page=True)
    page.goto(f"{live_server.url}/requests/{request.pk}/")
    expect(page.locator("ol.timeline")).to_contain_text("Approved")
    page.screenshot(path=SHOTS / "request-timeline.png", full_page=True)

    # A phone-width look at the team page: nothing overflows the viewport.
    phone = browser.new_page(viewport={"width": 390, "height": 844})
    sign_in(phone, live_server.url, "mia")
    phone.goto(f"{live_server.url}/teams/vision/")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    phone.screenshot(path=SHOTS / "team-page-phone.png", full_page=True)


def test_capacity_map_renders_the_seed_fleet(live_server, browser, portal_world, kube, kube_admin):
    admin, member, tenant = portal_world
    # The team runs a pod on two 1g.10gb slices of the A100: the map colours them as the team's.
    rc = ResourceClass.objects.get(slug="a100-80gb-mig-1g.10gb")
    grant_quota(actor=admin, tenant=tenant, resource_class=rc, amount=2)
    ns = tenant_namespace(tenant)
    wait_for(
        "quota",
        lambda: (
            (kube.get("ResourceQuota", "gpu-portal-quota", ns) or {})
            .get("status", {})
            .get("hard", {})
            .get("requests.nvidia.com/mig-1g.10gb")
            == "2"
        ),
        timeout=60,
    )
    pod = restricted_pod("notebook", {"nvidia.com/mig-1g.10gb": 2})
    pod["metadata"]["namespace"] = ns
    kube_admin.create(pod)  # the team's own pod
    wait_for(
        "pod running", lambda: kube.get("Pod", "notebook", ns)["status"].get("phase") == "Running"
    )
    inventory.sync_inventory(kube)

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    refused = csp_refusals(page)  # the map's colours are style="" attributes: allowed
    sign_in(page, live_server.url, "platform")
    page.goto(f"{live_server.url}/console/capacity/")
    for node in ("gpu-a100-0", "gpu-h100-0", "gpu-h200-0", "gpu-l40s-0", "gpu-rtx4090-0"):
        expect(page.locator("figure.node figcaption", has_text=node)).to_be_visible()
    a100 = page.locator("figure.node", has_text="gpu-a100-0")
    expect(a100.locator("rect.gpu")).to_have_count(4)
    expect(a100.locator("rect.inst")).to_have_count(2 + 7 + 1 + 1)
    expect(page.locator("figure.node", has_text="gpu-h100-0").locator("rect.inst")).to_have_count(
        16
    )
    page.screenshot(path=SHOTS / "capacity-map.png", full_page=True)
    assert refused == []
