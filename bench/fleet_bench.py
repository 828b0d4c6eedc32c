"""A fleet of two local clusters (issue 54's measure; `python -m bench --only fleet`).

1. Reconcile N teams cold on the main cluster alone (a single-cluster install: no fleet
   registered), then, from empty again, the same teams placed on "any worker of group bench"
   with the worker registered: the manager's queues and MultiKueue objects, and every team on
   the worker. Wall time and API calls of each; goal: the fleet ≤ 2.2 × the one cluster.
2. Submit → Running on the worker, p50 over a few Jobs: submitted through the portal on the
   manager (admitted there, dispatched by MultiKueue) against the same Job created directly on
   the worker in the team's namespace there (its own Kueue admits it). Goal: ≤ direct + 2 s.

Runs in a database and an instance label of its own, and deletes what it made on both
clusters. Starts the worker (`python -m localcluster worker up`) if it is not running, and
stops it again after.
"""

from __future__ import annotations

import base64
import statistics
import time

from django.conf import settings

from bench.isolation import platform_admin, run_of_its_own, throwaway_database
from bench.reconcile_bench import _seed
from catalog.models import ResourceClass
from catalog.product_labels import product_label
from localcluster import cluster
from localcluster import worker as local_worker
from localcluster.fleet import gpu_tolerations
from scheduler.cluster import doors, fleet
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster
from scheduler.cluster.reconcile import workers
from scheduler.cluster.reconcile.runs import reconcile_all, reconcile_tenant
from scheduler.cluster.render.labels import INSTANCE_LABEL, LOCAL_QUEUE
from scheduler.workloads import services as workloads
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL, restricted_container_security
from scheduler.workloads.lifecycle import sync
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import QuotaGrant, Tenant

SECRET = "gpu-portal-bench-worker-kubeconfig"
KUEUE_NAMESPACE = "kueue-system"
MODEL, SLUG = "H200-141GB", "h200-141gb"
GROUP = "bench"


def _cleanup(gateways: list[KubeGateway]) -> None:
    selector = f"{INSTANCE_LABEL}={settings.PORTAL_INSTANCE}"
    for kube in gateways:
        for kind in ("Namespace", "ClusterQueue", *workers.MULTIKUEUE_KINDS):
            for obj in kube.list(kind, label_selector=selector):
                kube.delete(kind, obj["metadata"]["name"])
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        left = sum(len(k.list("Namespace", label_selector=selector)) for k in gateways)
        if not left:
            return
        print(f"  waiting for {left} namespaces to go ...", flush=True)
        time.sleep(10)


def _timed(kube: KubeGateway, remote: KubeGateway, run) -> tuple[float, int, int]:
    calls = kube.stats.total + remote.stats.total
    writes = kube.stats.writes + remote.stats.writes
    t0 = time.perf_counter()
    run()
    return (
        time.perf_counter() - t0,
        kube.stats.total + remote.stats.total - calls,
        kube.stats.writes + remote.stats.writes - writes,
    )


def _register(kube: KubeGateway, admin) -> KubeGateway:
    """The platform team's steps; returns the worker's door (the one the reconcile uses)."""
    text = local_worker.kubeconfig_text()
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": KUEUE_NAMESPACE},
            "type": "Opaque",
            "data": {"kubeconfig": base64.b64encode(text.encode()).decode()},
        }
    )
    home = Cluster.objects.create(name="local")
    fleet.update_cluster(actor=admin, cluster=home, role="manager")
    fleet.register_cluster(
        actor=admin, name="bench-worker", group=GROUP, credentials_secret_name=SECRET
    )
    doors.forget()
    return doors.door("bench-worker")


def _running_on(gateway: KubeGateway, namespace: str, selector: str, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = gateway.list("Pod", namespace, label_selector=selector)
        if any((p.get("status") or {}).get("phase") == "Running" for p in pods):
            return time.monotonic()
        time.sleep(0.1)
    raise TimeoutError(f"no pod {selector} running in {namespace} after {timeout:.0f} s")


def _direct_job(name: str, namespace: str) -> dict:
    limits = {"nvidia.com/gpu": "1", "cpu": "10m", "memory": "16Mi"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": LOCAL_QUEUE},
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"bench": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": "gpu-low",
                    "nodeSelector": {"nvidia.com/gpu.product": product_label(MODEL)},
                    "tolerations": gpu_tolerations(),
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": limits, "limits": limits},
                            "securityContext": restricted_container_security(),
                        }
                    ],
                },
            },
        },
    }


def _latencies(kube: KubeGateway, remote: KubeGateway, admin, jobs: int) -> tuple[list, list]:
    """Submit → Running on the worker, through the portal and directly, one Job at a time
    (each cancelled before the next: the worker's one H200 node holds them one by one)."""
    tenant = Tenant.objects.order_by("slug")[0]
    rc = ResourceClass.objects.get(slug=SLUG)
    QuotaGrant.objects.filter(tenant=tenant).update(placement=f"group:{GROUP}")
    if not QuotaGrant.objects.filter(tenant=tenant, resource_class=rc).exists():
        QuotaGrant.objects.create(
            tenant=tenant,
            resource_class=rc,
            amount=1,
            starts_at=tenant.created_at,
            placement=f"group:{GROUP}",
        )
    reconcile_tenant(kube, tenant.pk)
    workers.reconcile_fleet(kube, tenant_ids={tenant.pk}, trigger="benchmark")
    ns = tenant.namespace
    time.sleep(5)  # the queue active on both clusters, the check ready
    portal, direct = [], []
    for i in range(jobs):
        t0 = time.monotonic()
        w = workloads.submit_workload(
            actor=admin,
            tenant=tenant,
            spec=workload_spec(
                name=f"far-{i}",
                kind="job",
                image="registry.k8s.io/pause:3.10",
                resources={SLUG: 1},
                priority="gpu-low",
            ),
        )
        sync.create_in_cluster(kube, w.pk)
        portal.append(_running_on(remote, ns, f"{WORKLOAD_LABEL}={w.pk}", 120) - t0)
        workloads.cancel_workload(actor=admin, workload=w)
        sync.delete_from_cluster(kube, w.pk)
        _gone(remote, ns)
        t0 = time.monotonic()
        remote.create(_direct_job(f"direct-{i}", ns))
        direct.append(_running_on(remote, ns, f"bench=direct-{i}", 120) - t0)
        remote.delete("Job", f"direct-{i}", ns)
        _gone(remote, ns)
    return portal, direct


def _gone(remote: KubeGateway, ns: str) -> None:
    deadline = time.monotonic() + 120
    while remote.list("Pod", ns) and time.monotonic() < deadline:
        time.sleep(0.2)


def run(*, tenants: int, jobs: int = 5) -> int:
    cluster.up()
    was_running = bool(local_worker.pids()) and local_worker.ready()
    if not was_running:
        local_worker.up()
    kube = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))
    remote = KubeGateway.from_kubeconfig_text(local_worker.kubeconfig_text())
    run_of_its_own("fleet")
    try:
        with throwaway_database("gpu_portal_fleet"):
            admin = platform_admin("fleet-admin")
            print(f"seeding {tenants} teams ...", flush=True)
            _seed(tenants)
            one = _timed(kube, remote, lambda: reconcile_all(kube, trigger="benchmark"))
            print(f"  one cluster: {one[0]:.1f} s, {one[1]} calls, {one[2]} writes", flush=True)
            _cleanup([kube, remote])
            door = _register(kube, admin)
            QuotaGrant.objects.update(placement=f"group:{GROUP}")

            def both() -> None:
                reconcile_all(kube, trigger="benchmark")
                problems = workers.reconcile_fleet(kube, trigger="benchmark")
                assert not problems, problems

            two = _timed(kube, door, both)
            print(f"  two clusters: {two[0]:.1f} s, {two[1]} calls, {two[2]} writes", flush=True)
            portal, direct = _latencies(kube, remote, admin, jobs)
    finally:
        kube.delete("Secret", SECRET, KUEUE_NAMESPACE)
        _cleanup([kube, remote])
        doors.forget()
        if not was_running:
            local_worker.down()
    _report(tenants, one, two, portal, direct)
    return 0


def _report(tenants, one, two, portal, direct) -> None:
    p50, d50 = statistics.median(portal), statistics.median(direct)
    print()
    print(f"Fleet: {tenants} teams on a manager and a worker (local clusters)")
    print(f"{'run':<44} {'wall s':>8} {'API calls':>10} {'writes':>8}")
    print(f"{'reconcile, one cluster (cold)':<44} {one[0]:>8.1f} {one[1]:>10} {one[2]:>8}")
    print(f"{'reconcile, manager + worker (cold)':<44} {two[0]:>8.1f} {two[1]:>10} {two[2]:>8}")
    print()
    print(f"{'figure':<44} {'value':>8} {'goal':>10}")
    print(f"{'fleet time / one cluster':<44} {two[0] / one[0]:>8.2f} {'≤ 2.20':>10}")
    print(f"{'fleet calls / one cluster':<44} {two[1] / one[1]:>8.2f} {'≤ 2.20':>10}")
    print(f"{'submit → Running on the worker, portal p50 s':<44} {p50:>8.2f}")
    print(f"{'submit → Running on the worker, direct p50 s':<44} {d50:>8.2f}")
    print(f"{'portal − direct, s':<44} {p50 - d50:>8.2f} {'≤ 2.00':>10}")
