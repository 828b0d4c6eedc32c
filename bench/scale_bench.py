"""A thousand teams on the local cluster (issue 55, 1; `python -m bench --only scale`): teams in
departments (Cohorts) reconciled onto a KWOK fleet, then the same Jobs twice at a steady rate:
first created directly with nothing of the portal running (Kueue alone: the only fair
baseline), then half through the portal's submit service and half as a member's kubectl writes
them, with the portal following in this process as it runs (the periodic workload sync back to
back, the metering ingest on a thread of its own every `--ingest-every-s`). It prints admissions
per second of each and their ratio, the follower's CPU and memory per 1,000 workloads followed,
the lag between a pod running and the portal's row saying so (p50, p99, every portal workload's
pod), the sync's and the ingest's time per run, and the team page and Queues page at p95.

What happens on the cluster is read from watches (`scale_watch.py`), its arithmetic is
`scale_report.py` (both tested pure). It sizes the fleet itself (`--nodes`) and, even when
interrupted, deletes what it made and its bench nodes.
"""

from __future__ import annotations

import cProfile
import resource
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.test import Client, override_settings

from bench import scale_world
from bench.isolation import (
    cleaned_up_after,
    cluster_as_it_runs,
    platform_admin,
    run_of_its_own,
    throwaway_database,
)
from bench.scale_cpu import cpu_by_command, process_cpu_s, spent, threads_cpu_s
from bench.scale_cpu import lines as cpu_lines
from bench.scale_report import per_thousand, percentile, rate
from bench.scale_watch import Admissions, PodStarts, RowStarts, Watch, lags, slowest
from catalog import facts
from core.errors import ClusterError
from localcluster import cluster
from localcluster.fleet import gpu_tolerations
from metering import ingest
from portal.settings import base as deployed
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


def _paced(count: int, per_s: float, submit: Callable[[int], object]) -> tuple[set[int], float]:
    """`submit(i)` for i < count at a steady rate, from a few threads (the API server's pace,
    not one client's round trips, sets how fast they go in). Returns those refused (counted,
    not waited for) and the CPU seconds the submissions took. Interrupted, it submits nothing
    more than the few already under way."""
    t0, failed, cpu = time.monotonic(), set(), [0.0]
    lock = threading.Lock()

    def one(i: int) -> None:
        time.sleep(max(0.0, t0 + i / per_s - time.monotonic()))
        c0 = time.thread_time()
        try:
            submit(i)
        except ClusterError as exc:
            failed.add(i)
            print(f"  submit {i} refused: {exc}", flush=True)
        finally:
            connection.close()  # a thread's own connection, if it used one
            with lock:
                cpu[0] += time.thread_time() - c0

    pool = ThreadPoolExecutor(8)
    try:
        list(pool.map(one, range(count)))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return failed, cpu[0]


class Loop(threading.Thread):
    """One of the portal's periodic tasks in this process, run every `every_s` (0: back to back,
    as beat runs the workload sync when a run lasts longer than its period), its CPU counted on
    its own thread and each run's wall time kept."""

    def __init__(
        self, name: str, work: Callable[[], object], every_s: float, profile_dir: Path | None
    ) -> None:
        super().__init__(daemon=True, name=name)
        self.work, self.every_s, self.profile_dir = work, every_s, profile_dir
        self.stop, self.cpu_s, self.errors = threading.Event(), 0.0, 0
        self.run_s: list[float] = []
        self.spans: list[tuple[float, float]] = []  # each run's start and end, monotonic

    def run(self) -> None:
        if self.profile_dir is None:
            return self._run()
        profiler = cProfile.Profile()  # this thread's calls only
        try:
            profiler.runcall(self._run)
        finally:
            self.profile_dir.mkdir(parents=True, exist_ok=True)
            profiler.dump_stats(self.profile_dir / f"{self.name}.prof")

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                c0, t0, began = time.thread_time(), time.perf_counter(), time.monotonic()
                try:
                    self.work()
                    self.run_s.append(time.perf_counter() - t0)
                    self.spans.append((began, time.monotonic()))
                except Exception as exc:  # counted and shown: one bad run must not end it
                    self.errors += 1
                    print(f"  {self.name} run failed: {exc!r}", flush=True)
                    self.stop.wait(1)
                self.cpu_s += time.thread_time() - c0
                self.stop.wait(max(0.0, self.every_s - (time.perf_counter() - t0)))
        finally:
            connection.close()  # this thread's own: else the database cannot be dropped

    def close(self) -> None:
        self.stop.set()
        self.join(timeout=300)
        if self.is_alive():
            print(f"  {self.name} did not stop in 300 s", flush=True)


def portal_loops(kube: KubeGateway, ingest_every_s: float, profile_dir: Path | None) -> list[Loop]:
    """The portal's following as it runs: the workload sync every beat period, with its
    watches open as long as its deployed settings keep them (the suite's settings shorten
    them), and the metering ingest on its own worker, every `ingest_every_s`."""

    def sync_run() -> int:
        with override_settings(SYNC_WORKLOADS_WATCH_S=deployed.SYNC_WORKLOADS_WATCH_S):
            return watching.sync_live_workloads(kube)

    return [
        Loop("sync", sync_run, deployed.SYNC_WORKLOADS_EVERY_S, profile_dir),
        Loop(
            "ingest",
            lambda: ingest.ingest_allocations(kube, prometheus_url=""),
            ingest_every_s,
            profile_dir,
        ),
    ]


def _until(done: Callable[[], bool], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.5)


def _drained(kube: KubeGateway, namespaces: set[str], wait_s: float) -> None:
    """Until no Job is left in these namespaces (they delete themselves once finished)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait_s:
        left = sum(1 for j in kube.list("Job") if j["metadata"].get("namespace") in namespaces)
        if not left:
            print(f"alone: its Jobs gone {time.monotonic() - t0:.0f} s later", flush=True)
            return
        time.sleep(2)
    print(f"alone: {left} Jobs still there after {wait_s:.0f} s", flush=True)


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


def _leave_nothing(kube: KubeGateway, wait_s: float = 900) -> None:
    """Delete what this run made on the cluster (its teams' namespaces with their Jobs, their
    ClusterQueues and departments' Cohorts, by its instance label) and, once the namespaces
    are gone, its bench nodes: a thousand queues left behind would weigh on every run after
    it, and the tests that run on this cluster next expect it as it was."""
    selector = f"{INSTANCE_LABEL}={settings.PORTAL_INSTANCE}"
    print(f"cleaning up {selector} ...", flush=True)
    for kind in ("Namespace", "ClusterQueue", "Cohort"):
        for obj in kube.list(kind, label_selector=selector):
            try:
                kube.delete(kind, obj["metadata"]["name"])
            except ClusterError as exc:  # the rest still go; the count below says what stays
                print(f"  {kind} {obj['metadata']['name']} not deleted: {exc}", flush=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        left = {
            k: len(kube.list(k, label_selector=selector)) for k in ("Namespace", "ClusterQueue")
        }
        if not any(left.values()):
            break
        print(f"  waiting for {left} to go ...", flush=True)
        time.sleep(10)
    else:
        print(f"  still there after {wait_s:.0f} s: delete {selector} by hand", flush=True)
    cluster_as_it_runs(bench_nodes=0)


def run(  # noqa: PLR0913 (the run's sizes)
    *,
    teams: int,
    departments: int,
    nodes: int,
    jobs: int,
    per_s: float,
    run_s: float,
    ingest_every_s: float = 10.0,
    profile_dir: Path | None = None,
) -> int:
    cluster_as_it_runs(bench_nodes=nodes)
    kube = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))
    run_of_its_own("scale")
    with cleaned_up_after(lambda: _leave_nothing(kube)):
        return _measure(kube, teams, departments, jobs, per_s, run_s, ingest_every_s, profile_dir)


def _measure(  # noqa: PLR0913 (the run's sizes)
    kube: KubeGateway,
    teams: int,
    departments: int,
    jobs: int,
    per_s: float,
    run_s: float,
    ingest_every_s: float,
    profile_dir: Path | None,
) -> int:
    with throwaway_database("gpu_portal_scale"):
        admin = platform_admin("scale-admin")
        scale_world.seed_tenants(0, teams, departments=departments, grant=(SLUG, 2))
        t0 = time.perf_counter()
        summary = reconcile_all(kube, trigger="benchmark")
        print(f"reconciled {summary.tenants} teams in {time.perf_counter() - t0:.0f} s", flush=True)
        team_list = list(Tenant.objects.order_by("slug"))
        wait_s, stall_s = max(600.0, 3 * jobs / per_s), max(120.0, 10 * run_s)
        # the harness's own connections and call counts, apart from the portal's
        harness = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))
        admissions = Admissions()
        threads: list = [Watch(harness, "KueueWorkload", admissions)]
        threads[0].start()  # before any submission: no admission goes unseen
        try:
            alone_keys = [(team_list[i % teams].namespace, f"alone-{i}") for i in range(jobs)]
            t0, cpu_before = time.monotonic(), cpu_by_command()
            refused, _ = _paced(jobs, per_s, lambda i: kube.create(
                _job(alone_keys[i][1], alone_keys[i][0], run_s)))  # fmt: skip
            print(f"alone: {jobs} submitted in {time.monotonic() - t0:.0f} s", flush=True)
            alone_keys = [k for i, k in enumerate(alone_keys) if i not in refused]
            alone = admissions.wait(alone_keys, wait_s, stall_s)
            phases = [("Kueue alone", spent(cpu_before, cpu_by_command()), time.monotonic() - t0)]
            # the baseline's Jobs hold their teams' quota and the API server for their 5 s: the
            # portal's phase starts on a cluster as quiet as the baseline's did
            _drained(harness, {t.namespace for t in team_list}, wait_s)

            pods = PodStarts()
            rows = RowStarts(pods)
            loops = portal_loops(kube, ingest_every_s, profile_dir)
            for thread in (
                Watch(harness, "Pod", pods, label_selector=WORKLOAD_LABEL),
                rows,
                *loops,
            ):
                thread.start()
                threads.append(thread)
            rss0, cpu0 = _rss_mib(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
            # the portal's CPU, its threads' own (watches, pools) too: the process's, less the
            # harness's (its watches, the submissions, this thread)
            theirs = [t for t in threads if t not in loops] + [threading.current_thread()]
            whole0, harness0 = process_cpu_s(), threads_cpu_s(theirs)

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

            t0, cpu_before = time.monotonic(), cpu_by_command()
            refused, submits_cpu = _paced(jobs, per_s, submit)
            print(f"following: {jobs} submitted in {time.monotonic() - t0:.0f} s", flush=True)
            # a portal workload the API server refused for good never gets a Kueue Workload
            portal = (
                Workload.objects.filter(owner_kind="")
                .exclude(state=Workload.State.FAILED)
                .values_list("namespace", "k8s_name")
            )
            keys = list(portal) + [
                (team_list[i % teams].namespace, f"kubectl-{i}")
                for i in range(1, jobs, 2)
                if i not in refused
            ]
            following = admissions.wait(keys, wait_s, stall_s)
            phases.append(
                ("portal following", spent(cpu_before, cpu_by_command()), time.monotonic() - t0)
            )
            # admitted is not started: the last Jobs' pods start after, and their lag counts too
            ours = set(
                Workload.objects.filter(owner_kind="")
                .exclude(state=Workload.State.FAILED)
                .values_list("pk", flat=True)
            )
            _until(lambda: ours <= set(pods.at), max(60.0, 10 * run_s))
            print(f"pods seen started: {len(ours & set(pods.at))} of {len(ours)}", flush=True)
            rows.close(catch_up_s=60)
            followed = Workload.objects.count()
            ends = Counter(  # which submissions: alone-, portal- or kubectl-<i>
                (state, reason, name.split("-")[0])
                for state, reason, name in Workload.objects.values_list(
                    "state", "reason", "k8s_name"
                )
            )
            print(
                "rows by state: " + ", ".join(f"{' '.join(k)} {n}" for k, n in sorted(ends.items()))
            )
            for w in Workload.objects.filter(reason="Deleted")[:3]:  # what such a row went through
                seen = w.events.order_by("created_at").values_list("created_at", "reason")
                print(f"  {w.k8s_name}: " + ", ".join(f"{r} {at:%H:%M:%S}" for at, r in seen))
            rss1 = _rss_mib()
            harness_cpu = threads_cpu_s(theirs) - harness0 + submits_cpu
            for loop in loops:
                loop.close()
            cpu_all = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu0
            portal_cpu = process_cpu_s() - whole0 - harness_cpu
        finally:
            for thread in reversed(threads):
                thread.close()
        lost = sum(getattr(t, "relists", 0) for t in threads)  # history compacted: relisted
        print(f"harness watches relisted {lost} times (each may hide a transition)", flush=True)
        pages = _pages(team_list, admin)
    figures = lags(pods.at, rows.at)
    print("the slowest pods (seconds into the portal's phase):", flush=True)
    print("\n".join(slowest(pods.at, rows.at, loops[0].spans, since=t0)), flush=True)
    _report(
        jobs, alone, following, loops, followed, rss1 - rss0, (cpu_all, portal_cpu), figures, pages
    )
    for label, used, wall_s in phases:
        print("\n".join(cpu_lines(label, used, wall_s)))
    return 0


def _report(jobs, alone, following, loops, followed, rss_mib, cpus, lags, pages) -> None:
    def per_s(times: list[float]) -> float:
        return rate(len(times), times[-1] - times[0]) if len(times) > 1 else float("nan")

    a, f = per_s(alone), per_s(following)
    sync_loop, ingest_loop = loops
    cpu_s = sync_loop.cpu_s + ingest_loop.cpu_s
    cpu_all, portal_cpu = cpus
    print()
    print(f"{'figure':<52} {'value':>10} {'goal':>12}")
    rows = [
        (f"admissions/s, Kueue alone ({len(alone)}/{jobs})", a, ""),
        (f"admissions/s, portal following ({len(following)}/{jobs})", f, ""),
        ("portal following / Kueue alone", f / a, "≥ 0.90"),
        ("follower CPU s per 1,000 (sync and ingest threads)", per_thousand(cpu_s, followed), ""),
        ("process CPU s per 1,000 (submits included)", per_thousand(cpu_all, followed), ""),
        (
            "portal CPU s per 1,000 (all its threads, user + system)",
            per_thousand(portal_cpu, followed),
            "",
        ),
        ("memory MiB per 1,000 workloads followed", per_thousand(rss_mib, followed), ""),
        (f"pod → row lag p50 s ({len(lags)} pods)", percentile(lags, 50), ""),
        ("pod → row lag p99 s", percentile(lags, 99), "≤ 5"),
        ("sync run p50 s (its watches' window included)", percentile(sync_loop.run_s, 50), ""),
        ("metering ingest per cycle p50 s", percentile(ingest_loop.run_s, 50), ""),
        ("team page p95 ms", pages["team page"] * 1000, "< 300"),
        ("queues page p95 ms", pages["queues page"] * 1000, "< 300"),
    ]
    for name, value, goal in rows:
        print(f"{name:<52} {value:>10.2f} {goal:>12}")
    print(
        f"follower: {len(sync_loop.run_s)} sync runs, {len(ingest_loop.run_s)} ingests,"
        f" {sync_loop.errors + ingest_loop.errors} failed; "
        f"{followed} workloads followed"
    )
