"""Metering at scale, in the same run as its floor (issue 7).

1. Ingest one minute of allocation for a 10,000-pod cluster, next to the bare API list of those
   pods (the floor). Goal: a steady minute ≤ 2 × the list. The pods are bound (spec.nodeName) to
   placeholder nodes this bench creates: unschedulable, without GPU labels and without KWOK, so
   the shared local cluster's seed nodes, pools and scheduler are untouched; the bench's own
   database maps the placeholders to GPU models (the Node inventory, as a sync would). Pods and
   nodes are deleted at the end (pods with grace 0: no kubelet will confirm them).
2. The platform dashboard over one year of hourly rollups for 200 tenants: the data queries
   (`platform_series`, `cost_by_tenant`, `idle_hours_this_month`) and the whole page as an admin
   sees it. Goal: data p95 < 200 ms.

Runs in a throwaway database (gpu_portal_meterbench) with its own instance label.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.utils import timezone

from catalog.models import ResourceClass
from catalog.services import ensure_resource_classes
from localcluster import cluster
from metering import ingest, rollups, selectors
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster, Node
from scheduler.cluster.render.labels import INSTANCE_LABEL, TENANT_LABEL
from tenants.models import Tenant

INSTANCE = "meterbench"
NODE_LABEL = "gpu-portal.local/meter-bench"
MODELS = ["A100-80GB", "H100-80GB", "H200-141GB", "L40S-48GB", "RTX4090-24GB"]
RESOURCE = {  # what pods on a node of each model ask for
    "A100-80GB": "nvidia.com/mig-3g.40gb",
    "H100-80GB": "nvidia.com/mig-1g.10gb",
    "H200-141GB": "nvidia.com/gpu",
    "L40S-48GB": "nvidia.com/gpu.shared",
    "RTX4090-24GB": "nvidia.com/gpu",
}


def _p95(samples: list[float]) -> float:
    return (
        statistics.quantiles(samples, n=20, method="inclusive")[18]
        if len(samples) > 1
        else samples[0]
    )


# --- part 1: ingest ------------------------------------------------------------------------------


def _nodes(n: int) -> list[tuple[str, str]]:
    return [(f"meterbench-{i:02d}", MODELS[i % len(MODELS)]) for i in range(n)]


def _create_world(kube: KubeGateway, pods: int, tenants: int, nodes: int) -> None:
    for name, _ in _nodes(nodes):
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {NODE_LABEL: "true"}},
                "spec": {"unschedulable": True},
            }
        )
    for t in range(tenants):
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": f"meterbench-t{t:03d}",
                    "labels": {TENANT_LABEL: f"mb{t:03d}", INSTANCE_LABEL: INSTANCE},
                },
            }
        )
    deadline = time.monotonic() + 120
    for t in range(tenants):  # pods need the namespace's default service account
        while kube.get("ServiceAccount", "default", f"meterbench-t{t:03d}") is None:
            if time.monotonic() > deadline:
                raise RuntimeError("service accounts did not appear")
            time.sleep(0.2)
    node_list = _nodes(nodes)

    def make(i: int) -> None:
        node, model = node_list[i % nodes]
        ns = f"meterbench-t{i % tenants:03d}"
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"p{i:05d}", "namespace": ns},
                "spec": {
                    "nodeName": node,
                    "tolerations": [{"operator": "Exists"}],
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {
                                "requests": {RESOURCE[model]: str(1 + i % 2)},
                                "limits": {RESOURCE[model]: str(1 + i % 2)},
                            },
                        }
                    ],
                },
            }
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(make, range(pods)))


def _cleanup(kube: KubeGateway) -> None:
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    for ns in kube.list("Namespace", label_selector=f"{INSTANCE_LABEL}={INSTANCE}"):
        name = ns["metadata"]["name"]
        # deletecollection with grace 0: no kubelet runs on the placeholders to confirm
        kube._call("delete", "Pod", "DELETE", f"/api/v1/namespaces/{name}/pods", body=body)
        kube.delete("Namespace", name)
    for node in kube.list("Node", label_selector=f"{NODE_LABEL}=true"):
        kube.delete("Node", node["metadata"]["name"])


def _seed_db(tenants: int, nodes: int) -> None:
    ensure_resource_classes(MODELS)
    Tenant.objects.bulk_create(
        Tenant(slug=f"mb{t:03d}", name=f"Meter bench {t}") for t in range(tenants)
    )
    local, _ = Cluster.objects.get_or_create(name="local")
    now = timezone.now()
    Node.objects.bulk_create(
        Node(
            cluster=local,
            name=name,
            gpu_model=model,
            sharing_strategy="time-slicing" if model == "L40S-48GB" else "none",
            gpu_count=8,
            last_seen_at=now,
        )
        for name, model in _nodes(nodes)
    )


def bench_ingest(kube: KubeGateway, *, pods: int, tenants: int, nodes: int) -> list[tuple]:
    print(
        f"creating {pods} pods for {tenants} tenants on {nodes} placeholder nodes ...", flush=True
    )
    t0 = time.perf_counter()
    _create_world(kube, pods, tenants, nodes)
    print(f"  created in {time.perf_counter() - t0:.0f} s", flush=True)
    _seed_db(tenants, nodes)
    floors = []
    for _ in range(3):
        t0 = time.perf_counter()
        listed = kube.list("Pod")
        floors.append(time.perf_counter() - t0)
    ours = sum(1 for p in listed if p["metadata"]["namespace"].startswith("meterbench-"))
    start = timezone.now().replace(second=0, microsecond=0)
    t0 = time.perf_counter()
    cold = ingest.ingest_allocations(kube, now=start, prometheus_url="")
    cold_s = time.perf_counter() - t0
    steady = []
    for minute in range(1, 4):
        t0 = time.perf_counter()
        result = ingest.ingest_allocations(
            kube, now=start + timedelta(minutes=minute), prometheus_url=""
        )
        steady.append(time.perf_counter() - t0)
    floor = statistics.median(floors)
    print(
        f"  {len(listed)} pods listed ({ours} of the bench), {cold.opened} intervals opened, "
        f"{cold.samples} samples a minute",
        flush=True,
    )
    return [
        ("bare list of all pods (floor)", floor, len(listed)),
        ("ingest, first minute (opens all)", cold_s, cold.opened),
        ("ingest, steady minute (median of 3)", statistics.median(steady), result.samples),
    ]


# --- part 2: dashboard ---------------------------------------------------------------------------


def _seed_rollups(tenants: int, days: int) -> int:
    """One year of hourly rollups: every tenant on two classes, a daily and weekly rhythm."""
    classes = list(ResourceClass.objects.filter(kind="whole").order_by("pk"))
    end = timezone.now().astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(days=days)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO metering_usagerollup
                (period, start, tenant_id, resource_class_id, gpu_model, gpu_fraction,
                 allocated_hours, known_hours, used_hours, quota_hours, samples)
            SELECT 'hour', h, t.id, rc.id, rc.gpu_model, rc.gpu_fraction,
                   a, a, round(a * (0.2 + 0.6 * random())::numeric, 4), a + 2, 60
              FROM generate_series(%s::timestamptz, %s::timestamptz, interval '1 hour') AS h
             CROSS JOIN (SELECT id, row_number() OVER (ORDER BY id) AS n FROM tenants_tenant) t
             CROSS JOIN LATERAL (
                   SELECT id, gpu_model, gpu_fraction FROM scheduler_resourceclass
                    WHERE id = ANY(%s) ORDER BY (id + t.n) %% 5 LIMIT 2) rc
             CROSS JOIN LATERAL (
                   SELECT (1 + (t.n + extract(hour FROM h)::int) %% 4)::numeric AS a) v
            """,
            [start, end - timedelta(hours=1), [rc.pk for rc in classes]],
        )
        return cursor.rowcount


def bench_dashboard(*, tenants: int, runs: int = 20) -> tuple[list[tuple], dict]:
    if Tenant.objects.count() < tenants:
        Tenant.objects.bulk_create(
            Tenant(slug=f"mbd{t:03d}", name=f"Dash {t}")
            for t in range(tenants - Tenant.objects.count())
        )
    ensure_resource_classes(MODELS)
    print(f"seeding one year of hourly rollups for {tenants} tenants ...", flush=True)
    t0 = time.perf_counter()
    rows = _seed_rollups(tenants, 365)
    seed_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    days = rollups.roll_up_days()
    days_s = time.perf_counter() - t0
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE metering_usagerollup")
    print(
        f"  {rows} hourly rows in {seed_s:.0f} s; {days} daily rows in {days_s:.1f} s", flush=True
    )
    month = selectors.current_month()
    data_times, page_times = [], []
    admin = get_user_model().objects.create_superuser("meterbench-admin", "a@example.com", "x")
    client = Client()
    client.force_login(admin)
    for _ in range(runs):
        t0 = time.perf_counter()
        selectors.platform_series(days=365)
        selectors.cost_by_tenant(month)
        selectors.idle_hours_this_month(month)
        data_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        response = client.get("/usage/platform/?days=365")
        page_times.append(time.perf_counter() - t0)
        assert response.status_code == 200
    return (
        [
            ("dashboard data, 1 year (p95)", _p95(data_times), runs),
            ("dashboard page, 1 year (p95)", _p95(page_times), runs),
            ("daily roll-up of the year", days_s, days),
        ],
        {"hourly_rows": rows},
    )


def run(*, pods: int = 10_000, tenants: int = 200, nodes: int = 20) -> int:
    cluster.up()
    settings.PORTAL_INSTANCE = INSTANCE
    settings.PROMETHEUS_URL = ""
    settings.ALLOWED_HOSTS = ["*"]
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = "gpu_portal_meterbench"
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    kube = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))
    try:
        _cleanup(kube)
        ingest_rows = bench_ingest(kube, pods=pods, tenants=tenants, nodes=nodes)
        _cleanup(kube)
        dash_rows, extra = bench_dashboard(tenants=tenants)
    finally:
        _cleanup(kube)
        connection.creation.destroy_test_db(old_name, verbosity=0)
    floor, _, steady = (r[1] for r in ingest_rows)
    cold = ingest_rows[1][1]
    data_p95 = dash_rows[0][1]
    print()
    print(f"Metering: {pods} pods, {tenants} tenants; {extra['hourly_rows']} hourly rollups")
    print(f"{'run':<40} {'wall s':>8} {'rows':>8}")
    for label, secs, n in ingest_rows + dash_rows:
        print(f"{label:<40} {secs:>8.3f} {n:>8}")
    print()
    checks = [
        ("steady ingest / bare list", steady / floor, "≤ 2.00", steady / floor <= 2),
        ("first ingest / bare list", cold / floor, "(info)", True),
        ("dashboard data p95 (ms)", data_p95 * 1000, "< 200", data_p95 < 0.2),
    ]
    print(f"{'ratio':<40} {'value':>8} {'goal':>10} {'met':>8}")
    for name, value, goal, ok in checks:
        print(f"{name:<40} {value:>8.2f} {goal:>10} {'yes' if ok else 'NO':>8}")
    return 0
