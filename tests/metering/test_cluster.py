"""Metering against the local cluster and a real Prometheus: pods of two tenants run, metering
follows them minute by minute, and the statement matches the intervals the test created."""

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from catalog.models import ResourceClass
from catalog.product_labels import product_label
from metering import ingest, pricing, prometheus, rollups, selectors
from metering.models import AllocationInterval, UsageRollup, UsageSample
from scheduler.cluster import inventory
from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.cluster.reconcile.specs import tenant_namespace
from tenants.services.grants import grant_quota
from tenants.services.tenants import create_tenant
from tests.scheduler.cluster_helpers import restricted_pod, unique_slug, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=False)]

H200 = "h200-141gb"
MIG_1G = "a100-80gb-mig-1g.10gb"


def _tenant_with_pod(
    kube, kube_admin, world, tenant_namespaces, *, slug_prefix, rc_slug, units, model
):
    tenant = create_tenant(actor=world.admin, slug=unique_slug(slug_prefix), name=slug_prefix)
    rc = ResourceClass.objects.get(slug=rc_slug)
    grant_quota(actor=world.admin, tenant=tenant, resource_class=rc, amount=units)
    ns = tenant_namespace(tenant)
    tenant_namespaces.append(ns)
    reconcile_tenant(kube, tenant.pk)
    wait_for(
        "quota status",
        lambda: (
            (kube.get("ResourceQuota", "gpu-portal-quota", ns) or {}).get("status", {}).get("hard")
        ),
    )
    pod = restricted_pod("trainer", {rc.resource_name: units})
    pod["metadata"]["namespace"] = ns
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": product_label(model)}
    kube_admin.create(pod)  # the team's own pod, not the portal's doing
    running = wait_for(
        "pod running",
        lambda: (
            (p := kube.get("Pod", "trainer", ns)) and p["status"].get("phase") == "Running" and p
        ),
        timeout=60,
    )
    return tenant, rc, ns, parse_datetime(running["status"]["startTime"])


def test_statement_follows_pods_on_the_cluster_with_real_prometheus(
    kube, kube_admin, tenant_namespaces, world, dcgm, prometheus_server, settings
):
    settings.PROMETHEUS_URL = ""
    inventory.sync_inventory(kube)
    a, a_rc, a_ns, a_start = _tenant_with_pod(
        kube,
        kube_admin,
        world,
        tenant_namespaces,
        slug_prefix="meta",
        rc_slug=H200,
        units=2,
        model="H200-141GB",
    )
    b, b_rc, b_ns, b_start = _tenant_with_pod(
        kube,
        kube_admin,
        world,
        tenant_namespaces,
        slug_prefix="metb",
        rc_slug=MIG_1G,
        units=1,
        model="A100-80GB",
    )

    # Minute 1, without Prometheus: both pods open an interval from their start time.
    first = ingest.ingest_allocations(kube, prometheus_url="")
    assert first.opened >= 2
    ia = AllocationInterval.objects.get(namespace=a_ns)
    ib = AllocationInterval.objects.get(namespace=b_ns)
    assert (ia.tenant, ia.resource_class, ia.units, ia.gpu_model) == (a, a_rc, 2, "H200-141GB")
    assert (ib.tenant, ib.resource_class, ib.units) == (b, b_rc, 1)
    assert ia.started_at == a_start and ib.started_at == b_start and ia.ended_at is None

    # Prometheus scrapes the stand-in: A idles at 10 %, B's MIG instance is 90 % busy.
    dcgm.namespaces.update({a_ns, b_ns})
    dcgm.util[(a_ns, "trainer")] = Decimal("0.1")
    dcgm.util[(b_ns, "trainer")] = Decimal("0.9")
    dcgm.fb_used_mib[(a_ns, "trainer")] = 2048
    want = {(a_ns, "trainer"), (b_ns, "trainer")}
    deadline = time.monotonic() + 60
    while not want <= (use := prometheus.pod_utilisation(prometheus_server.url)).keys():
        assert time.monotonic() < deadline, (
            f"Prometheus never had both pods: {sorted(use)}; {dcgm.scrapes} scrapes, "
            f"stand-in error {dcgm.last_error!r}; log: {prometheus_server.log_tail()[-600:]}"
        )
        time.sleep(0.5)
    assert use[(a_ns, "trainer")].util == Decimal("0.1")
    assert use[(b_ns, "trainer")].util == Decimal("0.9")  # from GR_ENGINE_ACTIVE (MIG)
    assert use[(a_ns, "trainer")].fb_used_mib == 2 * 2048  # two GPUs

    # Minute 2, with Prometheus; a restarted worker (fresh gateway) just carries on.
    settings.PROMETHEUS_URL = prometheus_server.url
    base = timezone.now().replace(second=0, microsecond=0)
    second = ingest.ingest_allocations(kube, now=base + timedelta(minutes=1, seconds=10))
    assert second.utilisation >= 2
    assert AllocationInterval.objects.filter(namespace__in=[a_ns, b_ns]).count() == 2
    ia.refresh_from_db()
    assert ia.util_samples == 1 and ia.util_mean == Decimal("0.1") and ia.fb_used_mib == 4096
    ingest.ingest_allocations(kube, now=base + timedelta(minutes=1, seconds=20))
    ia.refresh_from_db()
    assert ia.util_samples == 1  # the same minute counts once
    assert AllocationInterval.objects.filter(namespace__in=[a_ns, b_ns]).count() == 2
    assert [i.pod_name for i in selectors.low_use_holders(a)] == ["trainer"]
    assert selectors.low_use_holders(b) == []
    sample = UsageSample.objects.get(tenant=a, resource_class=a_rc, at=second.at)
    assert (sample.allocated, sample.known, sample.used, sample.quota) == (2, 2, Decimal("0.2"), 2)

    # A's pod goes; the next minute closes its interval where it was last seen.
    seen = AllocationInterval.objects.with_seen_until().get(namespace=a_ns).seen_until
    kube_admin.delete("Pod", "trainer", a_ns)
    wait_for("pod gone", lambda: kube.get("Pod", "trainer", a_ns) is None, timeout=60)
    third = ingest.ingest_allocations(kube, now=base + timedelta(minutes=2, seconds=10))
    assert third.closed >= 1
    ia.refresh_from_db()
    assert ia.ended_at == seen and ia.end_reason == AllocationInterval.EndReason.DELETED

    # The statement is the intervals the test made, priced.
    month = selectors.current_month(seen)
    statement = selectors.tenant_statement(a, month, basis="allocation", now=seen)
    line = statement.lines[0]
    held_us = 2 * round((seen - a_start).total_seconds() * 1_000_000)
    assert line.slug == H200
    assert line.allocated_hours == pricing.hours(held_us)
    assert line.allocated_cost == pricing.money(held_us * a_rc.price_per_hour / pricing.HOUR_US)
    assert statement.total == line.allocated_cost

    b_seen = AllocationInterval.objects.with_seen_until().get(namespace=b_ns).seen_until
    assert b_seen == third.at.replace(second=10)  # the last ingest saw it
    b_statement = selectors.tenant_statement(b, month, basis="allocation", now=b_seen)
    b_line = b_statement.lines[0]
    b_us = round((b_seen - b_start).total_seconds() * 1_000_000)
    assert b_line.allocated_hours == pricing.hours(b_us)
    assert b_rc.price_per_hour == (Decimal(3.5) / 7).quantize(Decimal("0.0001"))

    # Rollups: one hourly row per tenant and class, B used 90 % of what it held.
    assert rollups.roll_up_hours(now=base + timedelta(minutes=3)) >= 2
    rollups.roll_up_days(now=base + timedelta(minutes=3))
    b_hours = list(UsageRollup.objects.filter(tenant=b, period="hour"))
    known = sum(r.known_hours for r in b_hours)
    # two minutes observed (each hour row rounds to 4 places; they may fall in two hours)
    assert abs(known - Decimal(2) / 60) <= Decimal("0.0002")
    assert abs(sum(r.used_hours for r in b_hours) - known * Decimal("0.9")) <= Decimal("0.0002")
    assert UsageRollup.objects.filter(tenant=b, period="day").exists()

    # The beat task is the same call, through the process's gateway and settings.
    from metering import tasks

    done = tasks.ingest_allocations()
    assert done["pods"] >= 1 and done["utilisation"] >= 1
