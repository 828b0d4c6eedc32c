"""GPU health on the local cluster, with the DCGM stand-in feeding a real Prometheus: an XID 79
taints the node at the next check, drains its GPU pods lowest priority first (a
PodDisruptionBudget holds its pod), takes its capacity out of the pool, tells the team, and an
admin's acknowledgement clears it; heat over the warning level warns and does nothing else; a
flapping signal does not taint and untaint in a loop; Prometheus unreachable changes nothing."""

import time
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from catalog.models import Pool, ResourceClass
from core.prometheus import instant_query
from localcluster import fleet
from scheduler.cluster import inventory
from scheduler.cluster.reconcile.runs import reconcile_cluster_objects, reconcile_tenant
from scheduler.cluster.reconcile.specs import tenant_namespace
from scheduler.health import sweep, taints
from scheduler.health.models import HealthEvent, HealthImpact, NodeHealth
from tenants.models import AuditEvent, NotificationChannel, NotificationDelivery
from tenants.services import grants as grant_services
from tenants.services import tenants as tenant_services
from tests.scheduler.cluster_helpers import restricted_pod, unique_slug, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=False)]

XID = "DCGM_FI_DEV_XID_ERRORS"
TEMP = "DCGM_FI_DEV_GPU_TEMP"


@pytest.fixture
def sick_node(kube_admin, settings):
    """A B200 node of this test's own (no seed node has the model): tainting it disturbs no
    other test."""
    name = f"health-{settings.PORTAL_INSTANCE}-{uuid.uuid4().hex[:6]}".lower()
    kube_admin.create(
        fleet.node_manifest(
            {
                "name": name,
                "model": "B200-180GB",
                "gpus": 8,
                "migConfig": "all-disabled",
                "devicePluginConfig": "default",
                "labels": {"gpu-portal.local/health-test": settings.PORTAL_INSTANCE},
            }
        )
    )
    fleet.wait_nodes_ready(kube_admin.api, [name])
    yield name
    kube_admin.delete("Node", name)


def _taints(kube, node):
    return [
        t
        for t in (kube.get("Node", node) or {}).get("spec", {}).get("taints") or []
        if t["key"] == taints.TAINT_KEY
    ]


def _wait_scraped(url, query, want, what):
    deadline = time.monotonic() + 60
    while True:
        rows = instant_query(url, query, 5)
        if want(rows):
            return rows
        assert time.monotonic() < deadline, f"Prometheus never showed {what}: {rows}"
        time.sleep(0.5)


def _pod(name, node, priority_class, labels=None):
    pod = restricted_pod(name, {"nvidia.com/gpu": 1}, priority_class)
    pod["metadata"]["labels"] = labels or {}
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def test_xid_79_taints_drains_in_priority_order_and_clears_on_acknowledgement(
    kube, kube_admin, tenant_namespaces, world, dcgm, prometheus_server, sick_node, client,
    settings,
):  # fmt: skip
    settings.PROMETHEUS_URL = prometheus_server.url
    inventory.sync_inventory(kube)
    b200 = ResourceClass.objects.get(slug="b200-180gb")
    capacity_before = Pool.objects.get(resource_class=b200).capacity
    assert capacity_before >= 8

    tenant = tenant_services.create_tenant(
        actor=world.admin,
        slug=unique_slug("hlth"),
        name="Health team",
        allowed_priority_classes=["gpu-high", "gpu-low"],
    )
    grant_services.grant_quota(actor=world.admin, tenant=tenant, resource_class=b200, amount=3)
    # the platform team's and the team's chat channels (sent after commit by the notify worker)
    for owner in (None, tenant):
        NotificationChannel.objects.create(
            tenant=owner, kind="slack", name="chat", target="https://hooks.example/x"
        )
    ns = tenant_namespace(tenant)
    tenant_namespaces.append(ns)
    reconcile_cluster_objects(kube)
    reconcile_tenant(kube, tenant.pk)
    wait_for(
        "quota",
        lambda: (kube.get("ResourceQuota", "gpu-portal-quota", ns) or {}).get("status", {}),
    )
    for pod in (
        _pod("high", sick_node, "gpu-high"),
        _pod("low", sick_node, "gpu-low"),
        _pod("guarded", sick_node, "gpu-low", {"app": "guarded"}),
    ):
        pod["metadata"]["namespace"] = ns
        kube_admin.create(pod)
    kube_admin.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded", "namespace": ns},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        }
    )
    for name in ("high", "low", "guarded"):
        wait_for(
            f"{name} running",
            lambda n=name: (
                (kube.get("Pod", n, ns) or {}).get("status", {}).get("phase") == "Running"
            ),
            timeout=60,
        )
    wait_for(
        "the budget counts the guarded pod",
        lambda: (
            (kube_admin.get("PodDisruptionBudget", "guarded", ns) or {})
            .get("status", {})
            .get("currentHealthy")
            == 1
        ),
        timeout=30,
    )

    # Healthy GPUs first: the node reads healthy, nothing is tainted.
    dcgm.gpu_health[(sick_node, "3")] = {XID: 0, TEMP: 60}
    _wait_scraped(prometheus_server.url, f'{TEMP}{{Hostname="{sick_node}"}}', bool, "the GPU")
    calm = sweep.check_health(kube)
    assert calm.unknown == "" and not calm.opened and not calm.tainted
    assert NodeHealth.objects.get(node_name=sick_node).state == NodeHealth.State.HEALTHY

    # GPU 3 falls off the bus: one check later the node is tainted and drained.
    dcgm.gpu_health[(sick_node, "3")] = {XID: 79, TEMP: 60}
    _wait_scraped(
        prometheus_server.url,
        f'{XID}{{Hostname="{sick_node}"}} == 79',
        bool,
        "XID 79",
    )
    check = sweep.check_health(kube)
    assert check.tainted == [sick_node], check
    assert _taints(kube, sick_node) == [
        {"key": taints.TAINT_KEY, "value": settings.PORTAL_INSTANCE, "effect": "NoSchedule"}
    ]
    event = HealthEvent.objects.get(node_name=sick_node, closed_at__isnull=True)
    assert (event.gpu, event.action, event.description) == (
        "3",
        "drain",
        "XID 79 (GPU has fallen off the bus)",
    )
    assert event.gpu_uuid.startswith("GPU-")
    # lowest priority first; the budget holds the guarded pod, which stays for the next check
    evicted = list(
        HealthImpact.objects.filter(event=event, outcome="evicted").order_by("eviction_order")
    )
    assert [i.pod_name for i in evicted] == ["low", "high"]
    assert check.blocked == [f"{ns}/guarded"]
    assert event.drained_at is None and "PodDisruptionBudget" in event.drain_message
    wait_for("low evicted", lambda: kube.get("Pod", "low", ns) is None, timeout=60)
    assert NodeHealth.objects.get(node_name=sick_node).state == NodeHealth.State.SICK
    # the pool lost the node's capacity
    assert Pool.objects.get(resource_class=b200).capacity == capacity_before - 8
    told = {
        (d.tenant_id, d.subject)
        for d in NotificationDelivery.objects.filter(event="gpu.health", channel__isnull=False)
    }
    where = f"GPU 3 on node {sick_node} reported XID 79 (GPU has fallen off the bus)"
    assert (None, f"GPU health: {where}") in told  # the platform team
    assert (tenant.pk, f"2 of your pods stopped: {where}") in told  # the team: low and high
    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    assert {"gpu_health.event_opened", "node.health_tainted", "node.health_drain_blocked"} <= verbs

    # A human removes the taint with kubectl: the next check puts it back (level-triggered).
    kube_admin.merge_patch("Node", sick_node, {"spec": {"taints": None}})
    again = sweep.check_health(kube)
    assert again.tainted == [sick_node] and not again.opened
    assert len(_taints(kube, sick_node)) == 1

    # The team's page and the capacity map say what happened.
    client.force_login(world.admin)
    team_page = client.get(reverse("team_detail", args=[tenant.slug])).content.decode()
    assert (
        f"Your pod low was stopped because GPU 3 on node {sick_node} reported XID 79" in team_page
    )
    capacity_page = client.get(reverse("console:capacity")).content.decode()
    assert "GPU health: sick" in capacity_page
    health_page = client.get(reverse("console:gpu_health")).content.decode()
    assert sick_node in health_page and f"{ns}/low" in health_page

    # Prometheus goes away: health unknown, the taint and the event stay.
    prometheus_server.stop()
    blind = sweep.check_health(kube)
    assert blind.unknown.startswith("Prometheus unreachable")
    assert not blind.tainted and not blind.untainted and not blind.closed
    assert NodeHealth.objects.get(node_name=sick_node).state == NodeHealth.State.UNKNOWN
    assert len(_taints(kube, sick_node)) == 1
    assert HealthEvent.objects.filter(pk=event.pk, closed_at__isnull=True).exists()

    # An admin acknowledges: the taint goes, the capacity comes back. The gauge still says 79
    # (until the GPU is reset), so the event is latched, not reopened.
    response = client.post(reverse("console:gpu_health_ack", args=[sick_node]))
    assert response.status_code == 302
    event.refresh_from_db()
    assert event.close_reason == "acknowledged" and event.closed_by == world.admin
    assert event.latched
    taints.enforce(kube, event.cluster)
    assert _taints(kube, sick_node) == []
    assert Pool.objects.get(resource_class=b200).capacity == capacity_before
    assert AuditEvent.objects.filter(verb="node.health_untainted").exists()
    assert NotificationDelivery.objects.filter(
        event="gpu.health", subject=f"GPU health: node {sick_node} back in service"
    ).exists()


def test_heat_warns_and_does_nothing_else_and_a_flapping_signal_does_not_loop(
    kube, dcgm, prometheus_server, sick_node, settings
):
    settings.PROMETHEUS_URL = prometheus_server.url
    inventory.sync_inventory(kube)
    node_gpu = (sick_node, "0")
    t0 = timezone.now()

    def reading(value, at):
        dcgm.gpu_health[node_gpu] = {XID: 0, TEMP: value}
        _wait_scraped(
            prometheus_server.url,
            f'{TEMP}{{Hostname="{sick_node}",gpu="0"}} == {value}',
            bool,
            f"{value} C",
        )
        return sweep.check_health(kube, now=at)

    hot = reading(88, t0)  # over the 85 C warning, under the 95 C taint
    assert len(hot.opened) == 1 and not hot.tainted and not hot.evicted
    warning = HealthEvent.objects.get(node_name=sick_node, closed_at__isnull=True)
    assert (warning.action, warning.description) == ("warn", "GPU temperature 88 °C")
    assert NodeHealth.objects.get(node_name=sick_node).state == NodeHealth.State.WARNING
    assert _taints(kube, sick_node) == []

    # Flapping around the threshold (84/86, clear only below 80): one event all along.
    for minute, value in enumerate([84, 86, 84, 86], start=1):
        flap = reading(value, t0 + timedelta(minutes=minute))
        assert not flap.opened and not flap.closed and not flap.tainted
    assert HealthEvent.objects.filter(node_name=sick_node).count() == 1

    # Below 80 for the rule's clear spell: the warning closes by itself.
    cool = reading(70, t0 + timedelta(minutes=10))
    assert not cool.closed  # the clear spell starts now
    done = sweep.check_health(kube, now=t0 + timedelta(minutes=30))
    assert len(done.closed) == 1
    warning.refresh_from_db()
    assert warning.close_reason == "cleared"
    assert NodeHealth.objects.get(node_name=sick_node).state == NodeHealth.State.HEALTHY
    assert Decimal(warning.value) == Decimal(86)
