"""Submit → admitted by Kueue → pod Running, through the portal's service path and the team's
queue, next to a bare Job created straight in a namespace Kueue does not manage (the floor), in
the same run, with a backlog of 200 workloads already queued in another team's queue.

Goal (issue 12): portal + Kueue p50 ≤ direct p50 + 1 s. Runs in a throwaway database with its
own instance label and namespace prefix, and deletes what it made at the end.
"""

from __future__ import annotations

import statistics
import time
import uuid

from bench.isolation import platform_admin, run_of_its_own, throwaway_database
from catalog import facts
from catalog.models import Pool, ResourceClass
from catalog.services import ensure_resource_classes
from localcluster import cluster
from localcluster.fleet import gpu_tolerations
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.runs import reconcile_all
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import sync
from scheduler.workloads.models import Workload
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import Tenant
from tenants.services import grants as grant_services
from tenants.services import tenants as tenant_services

BACKLOG = 200
SAMPLES = 20
SLUG = "h100-80gb-mig-3g.40gb"
POLL_S = 0.05


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def _wait_running(kube: KubeGateway, namespace: str, selector: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = kube.list("Pod", namespace, label_selector=selector)
        if any((p.get("status") or {}).get("phase") == "Running" for p in pods):
            return
        time.sleep(POLL_S)
    raise TimeoutError(f"no Running pod for {selector} in {namespace} after {timeout} s")


def _direct_job(name: str, namespace: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"bench": name}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"bench": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"nvidia.com/gpu.product": facts.product_label("H100-80GB")},
                    "tolerations": gpu_tolerations(),  # the GPU nodes are tainted
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {
                                "requests": {"nvidia.com/mig-3g.40gb": "1"},
                                "limits": {"nvidia.com/mig-3g.40gb": "1"},
                            },
                        }
                    ],
                },
            },
        },
    }


def run() -> int:
    cluster.up()
    run_of_its_own("qbench")
    kube = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))
    direct_ns = f"qbench-direct-{uuid.uuid4().hex[:6]}"
    tenants: list[Tenant] = []
    with throwaway_database("gpu_portal_queue_bench"):
        try:
            ensure_resource_classes(["H100-80GB"])
            rc = ResourceClass.objects.get(slug=SLUG)
            # No lending: the backlog must not borrow the measured unit (a latency, not a fill).
            # In slices the model's line borrows by the widest of its pools: set them all.
            for model_class in ResourceClass.objects.filter(gpu_model=rc.gpu_model):
                Pool.objects.update_or_create(
                    resource_class=model_class, defaults={"borrowing_limit": 0}
                )
            Pool.objects.filter(resource_class=rc).update(capacity=16)
            admin = platform_admin("qbench-admin")
            for slug, units in (("measured", 1), ("backlog", 1)):
                tenant = tenant_services.create_tenant(
                    actor=admin, slug=slug, name=slug, allowed_priority_classes=["gpu-low"]
                )
                grant_services.grant_quota(
                    actor=admin, tenant=tenant, resource_class=rc, amount=units
                )
                tenants.append(tenant)
            reconcile_all(kube, trigger="benchmark")
            measured, backlog = tenants
            print(
                f"queueing a backlog of {BACKLOG} workloads in another team's queue ...", flush=True
            )
            for i in range(BACKLOG + 1):  # the first runs, the rest wait
                w = workloads.submit_workload(
                    actor=admin,
                    tenant=backlog,
                    spec=workload_spec(
                        name=f"b{i}",
                        kind="job",
                        image="registry.k8s.io/pause:3.10",
                        resources={SLUG: 1},
                        priority="gpu-low",
                    ),
                )
                sync.create_in_cluster(kube, w.pk)
            kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": direct_ns}})
            portal, direct = [], []
            print(f"measuring {SAMPLES} submits each way ...", flush=True)
            for i in range(SAMPLES):
                t0 = time.perf_counter()
                w = workloads.submit_workload(
                    actor=admin,
                    tenant=measured,
                    spec=workload_spec(
                        name=f"m{i}",
                        kind="job",
                        image="registry.k8s.io/pause:3.10",
                        resources={SLUG: 1},
                        priority="gpu-low",
                    ),
                )
                sync.create_in_cluster(kube, w.pk)
                _wait_running(kube, measured.namespace, f"gpu-portal.io/workload={w.pk}")
                portal.append(time.perf_counter() - t0)
                workloads.cancel_workload(actor=admin, workload=w)
                sync.delete_from_cluster(kube, w.pk)
                _gone(kube, measured.namespace, f"gpu-portal.io/workload={w.pk}")

                t0 = time.perf_counter()
                kube.create(_direct_job(f"d{i}", direct_ns))
                _wait_running(kube, direct_ns, f"bench=d{i}")
                direct.append(time.perf_counter() - t0)
                kube.delete("Job", f"d{i}", direct_ns, propagation="Foreground")
                _gone(kube, direct_ns, f"bench=d{i}")
            queued = Workload.objects.filter(tenant=backlog).count() - 1
        finally:
            kube.delete("Namespace", direct_ns)
            for tenant in tenants:
                kube.delete("Namespace", tenant.namespace)
                kube.delete("ClusterQueue", tenant.namespace)

    p50_portal, p50_direct = statistics.median(portal), statistics.median(direct)
    print()
    print(f"Submit to pod Running, {SAMPLES} each, {queued} workloads queued in another queue")
    print(f"{'path':<34} {'p50 s':>8} {'p95 s':>8}")
    print(
        f"{'portal service + Kueue queue':<34} {p50_portal:>8.3f} {_percentile(portal, 95):>8.3f}"
    )
    print(
        f"{'direct Job, no Kueue (floor)':<34} {p50_direct:>8.3f} {_percentile(direct, 95):>8.3f}"
    )
    print()
    gap = p50_portal - p50_direct
    print(f"{'ratio':<34} {'value':>8} {'goal':>10} {'met':>6}")
    met = "yes" if gap <= 1 else "NO"
    print(f"{'p50 portal − direct (s)':<34} {gap:>8.3f} {'≤ 1.000':>10} {met:>6}")
    print(f"{'p50 portal / direct':<34} {p50_portal / p50_direct:>8.2f} {'—':>10} {'':>6}")
    return 0


def _gone(kube: KubeGateway, namespace: str, selector: str, timeout: float = 60) -> None:
    """Wait until the pods are gone, so the next sample starts from a free slice."""
    deadline = time.monotonic() + timeout
    while kube.list("Pod", namespace, label_selector=selector) and time.monotonic() < deadline:
        time.sleep(POLL_S)
