"""A thousand teams on the local cluster (issue 55, 1; `python -m bench --only scale`): teams in
departments (Cohorts) reconciled onto a KWOK fleet, then the same Jobs twice at a steady rate:
first created directly with nothing of the portal running (Kueue alone: the only fair
baseline), then half through the portal's submit service and half as a member's kubectl writes
them, with the portal following (its periodic workload sync and metering ingest in a loop, in
this process). It prints admissions per second of each and their ratio, the follower's CPU and
memory per 1,000 workloads followed, the lag between a pod running and the portal's row saying
so (p50, p99), the ingest time per cycle, and the team page and Queues page at p95.

Written for the integrator's cluster run; its arithmetic is `scale_report.py` (tested pure).
Start the fleet first: `python -m localcluster up --large 200`.
"""

from __future__ import annotations

import resource
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connection
from django.test import Client, override_settings

from bench import scale_world
from bench.isolation import platform_admin, run_of_its_own, throwaway_database
from bench.scale_report import per_thousand, percentile, rate
from catalog import facts
from localcluster import cluster
from localcluster.fleet import gpu_tolerations
from metering import ingest
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.runs import reconcile_all
from scheduler.cluster.render.labels import INSTANCE_LABEL
from scheduler.workloads import services as workloads
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL, restricted_container_security
from scheduler.workloads.lifecycle import sync, watching
from scheduler.workloads.models import Workload
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import Tenant

SLUG, RESOURCE = "h100-80gb-mig-3g.40gb", "nvidia.com/mig-3g.40gb"
LAG_SAMPLE = 50  # portal workloads whose pod → row lag is timed
POLL_S = 0.5


def _job(name: str, namespace: str, run_s: float) -> dict:
    """A Job as a member's kubectl writes it (Kueue takes it in by the namespace's queue)."""
    limits = {RESOURCE: "1", "cpu": "10m", "memory": "16Mi"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 0,  # the Job controller clears what ran
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": "gpu-low",
                    "nodeSelector": {"nvidia.com/gpu.product": facts.product_label("H100-80GB")},
                    "tolerations": gpu_tolerations(),
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "command": ["sleep", f"{run_s:g}"],
                            "resources": {"requests": limits, "limits": limits},
                            # the team namespaces enforce Pod Security `restricted`: without
                            # it the Job controller's pods were refused, and every admitted
                            # Job held its quota with no pod (the first run's "nothing runs")
                            "securityContext": restricted_container_security(),
                        }
                    ],
                },
            },
        },
    }


def _paced(count: int, per_s: float, submit) -> None:
    """`submit(i)` for i < count at a steady rate, from a few threads (the API server's pace,
    not one client's round trips, sets how fast they go in)."""
    t0 = time.monotonic()

    def one(i: int) -> None:
        time.sleep(max(0.0, t0 + i / per_s - time.monotonic()))
        submit(i)
        connection.close()  # a thread's own connection, if it used one

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(count)))


def _admissions(kube: KubeGateway, names: set[str], timeout_s: float) -> list[float]:
    """When each of these Kueue Workloads (by owner name) was first seen admitted, polled."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while len(seen) < len(names) and time.monotonic() < deadline:
        for w in kube.list("KueueWorkload"):
            refs: list[dict] = w["metadata"].get("ownerReferences") or []
            owner = refs[0].get("name") if refs else None
            conditions = (w.get("status") or {}).get("conditions") or []
            admitted = any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)
            if owner in names and admitted and owner not in seen:
                seen[owner] = time.monotonic()
        time.sleep(POLL_S)
    return sorted(seen.values())


class Follower(threading.Thread):
    """The portal's following in this process: the periodic sync and a metering ingest per
    cycle, its CPU counted on its own thread."""

    def __init__(self, kube: KubeGateway) -> None:
        super().__init__(daemon=True)
        self.kube, self.stop, self.cpu_s = kube, threading.Event(), 0.0
        self.ingest_s: list[float] = []

    def run(self) -> None:
        while not self.stop.is_set():
            c0 = time.thread_time()
            watching.sync_live_workloads(self.kube)
            t0 = time.perf_counter()
            ingest.ingest_allocations(self.kube, prometheus_url="")
            self.ingest_s.append(time.perf_counter() - t0)
            self.cpu_s += time.thread_time() - c0
        connection.close()


def _lags(kube: KubeGateway, sample: list[int], timeout_s: float) -> list[float]:
    """Seconds from a pod seen Running (one labelled list per poll) to its row saying running."""
    pod_at: dict[int, float] = {}
    row_at: dict[int, float] = {}
    selector = f"{WORKLOAD_LABEL} in ({','.join(map(str, sample))})"
    deadline = time.monotonic() + timeout_s
    while len(row_at) < len(sample) and time.monotonic() < deadline:
        now = time.monotonic()
        for pod in kube.list("Pod", label_selector=selector):
            wid = int(pod["metadata"]["labels"][WORKLOAD_LABEL])
            if (pod.get("status") or {}).get("phase") == "Running":
                pod_at.setdefault(wid, now)
        running = Workload.objects.filter(pk__in=sample, started_at__isnull=False)
        for wid in running.values_list("pk", flat=True):
            row_at.setdefault(wid, now)
        time.sleep(POLL_S / 2)
    return [row_at[w] - pod_at[w] for w in row_at if w in pod_at]


def _rss_mib() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _pages(teams: list[Tenant], admin) -> dict[str, float]:
    owner = teams[0].memberships.get(role="owner").user
    out = {}
    with override_settings(ALLOWED_HOSTS=["testserver"]):
        for label, user, url in (
            ("team page", owner, f"/teams/{teams[0].slug}/"),
            ("queues page", admin, "/console/queues/"),
        ):
            client = Client()
            client.force_login(user)
            samples = []
            for _ in range(21):
                t0 = time.perf_counter()
                client.get(url)
                samples.append(time.perf_counter() - t0)
            out[label] = percentile(samples[1:], 95)
    return out


def _leave_nothing(kube: KubeGateway) -> None:
    """Delete what this run made on the cluster (its teams' namespaces with their Jobs, their
    ClusterQueues and departments' Cohorts, by its instance label) and its bench nodes: a
    thousand queues left behind would weigh on every run after it."""
    selector = f"{INSTANCE_LABEL}={settings.PORTAL_INSTANCE}"
    for kind in ("Namespace", "ClusterQueue", "Cohort"):
        for obj in kube.list(kind, label_selector=selector):
            kube.delete(kind, obj["metadata"]["name"])
    cluster.up(large=0)


def run(*, teams: int, departments: int, nodes: int, jobs: int, per_s: float, run_s: float):
    cluster.up(large=nodes)
    kube = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))
    run_of_its_own("scale")
    try:
        return _measure(kube, teams, departments, jobs, per_s, run_s)
    finally:
        _leave_nothing(kube)


def _measure(  # noqa: PLR0913 (the run's sizes)
    kube: KubeGateway, teams: int, departments: int, jobs: int, per_s: float, run_s: float
) -> int:
    with throwaway_database("gpu_portal_scale"):
        admin = platform_admin("scale-admin")
        scale_world.seed_tenants(0, teams, departments=departments, grant=(SLUG, 2))
        t0 = time.perf_counter()
        summary = reconcile_all(kube, trigger="benchmark")
        print(f"reconciled {summary.tenants} teams in {time.perf_counter() - t0:.0f} s", flush=True)
        team_list = list(Tenant.objects.order_by("slug"))
        wait_s = max(600.0, 3 * jobs / per_s)

        names = {f"alone-{i}" for i in range(jobs)}
        _paced(jobs, per_s, lambda i: kube.create(
            _job(f"alone-{i}", team_list[i % teams].namespace, run_s)))  # fmt: skip
        alone = _admissions(kube, names, wait_s)

        follower = Follower(kube)
        rss0, cpu0 = _rss_mib(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
        follower.start()

        def submit(i: int) -> None:
            team = team_list[i % teams]
            if i % 2:
                kube.create(_job(f"kubectl-{i}", team.namespace, run_s))
                return
            w = workloads.submit_workload(
                actor=admin, tenant=team, spec=workload_spec(
                    name=f"portal-{i}", kind="job", image="registry.k8s.io/pause:3.10",
                    command=["sleep", f"{run_s:g}"], resources={SLUG: 1}, priority="gpu-low",
                ),
            )  # fmt: skip
            sync.create_in_cluster(kube, w.pk)

        _paced(jobs, per_s, submit)
        followed = Workload.objects.count()
        sample = list(Workload.objects.filter(owner_kind="").values_list("pk", flat=True))
        lags = _lags(kube, sample[-LAG_SAMPLE:], 120.0)
        portal_names = set(Workload.objects.values_list("k8s_name", flat=True))
        portal_names |= {f"kubectl-{i}" for i in range(1, jobs, 2)}
        following = _admissions(kube, portal_names, wait_s)
        rss1 = _rss_mib()
        follower.stop.set()
        follower.join(timeout=120)
        cpu_all = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu0
        pages = _pages(team_list, admin)
    _report(jobs, alone, following, follower, followed, rss1 - rss0, cpu_all, lags, pages)
    return 0


def _report(jobs, alone, following, follower, followed, rss_mib, cpu_all, lags, pages) -> None:
    def per_s(times: list[float]) -> float:
        return rate(len(times), times[-1] - times[0]) if len(times) > 1 else float("nan")

    a, f = per_s(alone), per_s(following)
    print()
    print(f"{'figure':<52} {'value':>10} {'goal':>12}")
    rows = [
        (f"admissions/s, Kueue alone ({len(alone)}/{jobs})", a, ""),
        (f"admissions/s, portal following ({len(following)}/{jobs})", f, ""),
        ("portal following / Kueue alone", f / a, "≥ 0.90"),
        ("follower CPU s per 1,000 workloads followed", per_thousand(follower.cpu_s, followed), ""),
        ("process CPU s per 1,000 (submits included)", per_thousand(cpu_all, followed), ""),
        ("memory MiB per 1,000 workloads followed", per_thousand(rss_mib, followed), ""),
        ("pod → row lag p50 s", percentile(lags, 50), ""),
        ("pod → row lag p99 s", percentile(lags, 99), "≤ 5"),
        ("metering ingest per cycle p50 s", percentile(follower.ingest_s, 50), ""),
        ("team page p95 ms", pages["team page"] * 1000, "< 300"),
        ("queues page p95 ms", pages["queues page"] * 1000, "< 300"),
    ]
    for name, value, goal in rows:
        print(f"{name:<52} {value:>10.2f} {goal:>12}")
