"""Does a team's grant stay busy while its work waits? And how fast does a deep queue admit?

1. Fill: one team granted N units of H100 3g.40gb, 10 × N one-unit Jobs (`sleep D`) submitted
   through the portal's service path. While work waits, how many of the N units run (goal:
   ≥ 0.85 N on average), and the makespan against the ideal 10 × D (goal: ≤ 1.3 ×). Measured
   at two run times, D = 10 s and 30 s: each Job costs the cluster a few seconds between one
   run and the next whatever its length (the Job controller, Kueue, the scheduler, the node
   starting the container), so the busy share depends on D, and one length alone would say
   more about the length chosen than about the portal.
2. Deep queue: four teams, each granted 4 units, each with `DEEP` one-unit Jobs queued at once
   (kubectl-style, straight into their namespaces): the time until what fits (16) is admitted,
   against the time one team alone takes to have its 4 admitted, in the same run.

Issue 29's measure. Runs in a throwaway database with its own instance label (so its own Kueue
cohort: nothing to borrow) and namespace prefix, and deletes what it made at the end.
"""

from __future__ import annotations

import time
from datetime import datetime

from bench.isolation import platform_admin, run_of_its_own, throwaway_database
from catalog import facts
from catalog.models import Pool, ResourceClass
from catalog.services import ensure_resource_classes
from localcluster import cluster
from localcluster.fleet import gpu_tolerations
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.runs import reconcile_all, reconcile_tenant
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import sync
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import Tenant
from tenants.services import grants as grant_services
from tenants.services import tenants as tenant_services

SLUG = "h100-80gb-mig-3g.40gb"
RESOURCE = "nvidia.com/mig-3g.40gb"
UNITS = 8  # N: the fleet's H100 node has 16 x 3g.40gb
RUN_LENGTHS_S = (10.0, 30.0)  # D: each Job's run time, one fill part per length
DEEP = 75  # queued Jobs per team in the deep-queue part (4 teams: 300)
POLL_S = 0.25


def _pods(kube: KubeGateway, namespace: str) -> tuple[int, int]:
    """(Running, Succeeded) pods of the namespace."""
    phases = [(p.get("status") or {}).get("phase") for p in kube.list("Pod", namespace)]
    return phases.count("Running"), phases.count("Succeeded")


def _admitted(kube: KubeGateway, namespace: str) -> int:
    n = 0
    for w in kube.list("KueueWorkload", namespace):
        conditions = (w.get("status") or {}).get("conditions") or []
        n += any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)
    return n


def _member_job(name: str, namespace: str) -> dict:
    """A Job as a member's kubectl writes it: no queue label (Kueue takes it in anyway)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
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
                            "resources": {
                                "requests": {RESOURCE: "1", "cpu": "10m", "memory": "16Mi"},
                                "limits": {RESOURCE: "1", "cpu": "10m", "memory": "16Mi"},
                            },
                        }
                    ],
                },
            },
        },
    }


def _fill(kube: KubeGateway, admin, team: Tenant, run_s: float) -> dict[str, float]:
    jobs = 10 * UNITS
    print(f"fill: {jobs} Jobs of `sleep {run_s:g}` for a grant of {UNITS} ...", flush=True)
    t0 = time.monotonic()
    for i in range(jobs):
        w = workloads.submit_workload(
            actor=admin,
            tenant=team,
            spec=workload_spec(
                name=f"f{i}",
                kind="job",
                image="registry.k8s.io/pause:3.10",
                command=["sleep", f"{run_s:g}"],
                resources={SLUG: 1},
                priority="gpu-low",
            ),
        )
        sync.create_in_cluster(kube, w.pk)
    submitted = time.monotonic() - t0
    busy: list[int] = []
    deadline = t0 + 10 * run_s * 4
    while time.monotonic() < deadline:
        running, done = _pods(kube, team.namespace)
        if done >= jobs:
            break
        if jobs - done - running > 0:  # work waits: every granted unit should be busy
            busy.append(running)
        time.sleep(POLL_S)
    makespan = time.monotonic() - t0
    held, ran = _timeline(kube, team.namespace)
    split = unit_time(held, ran, UNITS)
    runs = [b - a for a, b in ran]
    return {
        # the harness itself: the pods' runs, from the cluster's whole-second stamps
        "ran_mean_s": sum(runs) / len(runs) if runs else 0.0,
        "ran_max_s": max(runs, default=0.0),
        **{f"split_{k}": v for k, v in split.items()},
        "submitted_s": submitted,
        "busy": sum(busy) / len(busy) / UNITS if busy else 0.0,
        "makespan_s": makespan,
        "run_s": run_s,
        "ideal_s": 10 * run_s,
        "finished": float(done >= jobs),
    }


Span = tuple[float, float]


def _seconds(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def _condition_at(obj: dict, kind: str) -> float | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind and c["status"] == "True":
            return _seconds(c.get("lastTransitionTime"))
    return None


def unit_time(held: list[Span], ran: list[Span], units: int) -> dict[str, float]:
    """Where a grant's unit-seconds went while work waited (from the first admission to the
    last): running, held by Kueue but not running (the pod starting, or ended and its Job and
    Workload not finished yet: the cluster's controllers), and not held at all (between one
    workload's release and the next admission: Kueue). Shares of units × that window."""
    if not held:
        return {"running": 0.0, "held_idle": 0.0, "free": 0.0, "window_s": 0.0}
    start, end = min(a for a, _ in held), max(a for a, _ in held)
    span = units * (end - start)

    def inside(spans: list[Span]) -> float:
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)

    running, holding = inside(ran), inside(held)
    if span <= 0:
        return {"running": 0.0, "held_idle": 0.0, "free": 0.0, "window_s": 0.0}
    return {
        "running": running / span,
        "held_idle": (holding - running) / span,
        "free": (span - holding) / span,
        "window_s": end - start,
    }


def _timeline(kube: KubeGateway, namespace: str) -> tuple[list[Span], list[Span]]:
    """(Kueue's quota held, the pods' runs) of every finished Job of the namespace, from the
    API's timestamps (whole seconds: over 80 Jobs the rounding averages out)."""
    held = []
    for w in kube.list("KueueWorkload", namespace):
        a, b = _condition_at(w, "QuotaReserved"), _condition_at(w, "Finished")
        if a is not None and b is not None:
            held.append((a, b))
    ran = []
    for pod in kube.list("Pod", namespace):
        status = pod.get("status") or {}
        a = _seconds(status.get("startTime"))  # Running (the local cluster sets it then)
        for c in status.get("containerStatuses") or []:
            b = _seconds(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            if a is not None and b is not None:
                ran.append((a, b))
    return held, ran


def _admit_what_fits(kube: KubeGateway, teams: list[Tenant], per_team: int) -> tuple[float, float]:
    """(seconds to create the Jobs, seconds from the first created until 4 per team are
    admitted)."""
    t0 = time.monotonic()
    for i in range(per_team):
        for team in teams:  # interleaved, as teams submit
            kube.create(_member_job(f"q{i}", team.namespace))
    created = time.monotonic() - t0
    want = 4 * len(teams)
    deadline = t0 + 300
    while time.monotonic() < deadline:
        if sum(_admitted(kube, t.namespace) for t in teams) >= want:
            return created, time.monotonic() - t0
        time.sleep(POLL_S)
    raise TimeoutError(f"{want} admissions not reached in 300 s")


def _done_with(kube: KubeGateway, admin, tenant: Tenant) -> None:
    """Archive a part's team (its grants end, so the next part may be granted the units) and
    remove what it left on the cluster."""
    tenant_services.change_tenant_status(actor=admin, tenant=tenant, action="archive")
    kube.delete("Namespace", tenant.namespace)
    kube.delete("ClusterQueue", tenant.namespace)


def _print_fill(fill: dict[str, float]) -> None:
    ratio = fill["makespan_s"] / fill["ideal_s"]
    print()
    run_s = fill["run_s"]
    print(f"Fill: {10 * UNITS} one-unit Jobs of {run_s:g} s for a grant of {UNITS} units")
    print(f"{'figure':<44} {'value':>8} {'goal':>10} {'met':>6}")
    met = "yes" if fill["busy"] >= 0.85 else "NO"
    print(f"{'units busy while work waits / N':<44} {fill['busy']:>8.2f} {'≥ 0.85':>10} {met:>6}")
    met = "yes" if ratio <= 1.3 and fill["finished"] else "NO"
    print(f"{'makespan / ideal (10 × D)':<44} {ratio:>8.2f} {'≤ 1.30':>10} {met:>6}")
    print(f"{'makespan s (ideal s)':<44} {fill['makespan_s']:>8.1f} {fill['ideal_s']:>10.1f}")
    print(f"{'of which submitting all, s':<44} {fill['submitted_s']:>8.1f}")
    ran = f"{fill['ran_mean_s']:.1f} / {fill['ran_max_s']:.0f}"
    print(f"{'pods ran, mean / longest s (asked D)':<44} {ran:>8} {run_s:>10g}")
    if fill["ran_mean_s"] > 0:  # the makespan had each pod run what the cluster ran it for
        as_ran = fill["makespan_s"] / (10 * fill["ran_mean_s"])
        print(f"{'makespan / (10 × the mean run)':<44} {as_ran:>8.2f}")
    # Where the unit-seconds went while work waited, from Kueue's and the pods' timestamps.
    print(f"{'from first to last admission, s':<44} {fill['split_window_s']:>8.1f}")
    print(f"{'  units running a pod':<44} {fill['split_running']:>8.2f}")
    print(f"{'  held by Kueue, pod not running':<44} {fill['split_held_idle']:>8.2f}")
    print(f"{'  not held (release to next admission)':<44} {fill['split_free']:>8.2f}")
    idle = fill["split_held_idle"] + fill["split_free"]
    if fill["split_running"] > 0:
        per_job = run_s * idle / fill["split_running"]  # seconds lost per job, whatever its length
        print(f"{'lost per Job, s (cluster and Kueue)':<44} {per_job:>8.1f}")
        for minutes in (1, 10):
            d = 60.0 * minutes
            print(
                f"{f'  so busy with {minutes}-min Jobs (projected)':<44} {d / (d + per_job):>8.2f}"
            )
    print(flush=True)


def run() -> int:
    cluster.up()
    cluster.fresh_kwok()  # pods end when asked, however long the cluster has run
    run_of_its_own("fbench")
    kube = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))
    tenants: list[Tenant] = []
    with throwaway_database("gpu_portal_fill_bench"):
        try:
            ensure_resource_classes(["H100-80GB"])
            rc = ResourceClass.objects.get(slug=SLUG)
            Pool.objects.update_or_create(resource_class=rc, defaults={"capacity": 16})
            admin = platform_admin("fbench-admin")

            def team(slug: str, units: int) -> Tenant:
                tenant = tenant_services.create_tenant(
                    actor=admin, slug=slug, name=slug, allowed_priority_classes=["gpu-low"]
                )
                grant_services.grant_quota(
                    actor=admin, tenant=tenant, resource_class=rc, amount=units
                )
                tenants.append(tenant)
                return tenant

            for i, run_s in enumerate(RUN_LENGTHS_S):
                filler = team(f"fill{i}", UNITS)
                reconcile_all(kube, trigger="benchmark")
                fill = _fill(kube, admin, filler, run_s)
                _done_with(kube, admin, filler)
                _print_fill(fill)
            alone = team("alone", 4)
            reconcile_tenant(kube, alone.pk)
            print("deep queue: one team, 4 Jobs ...", flush=True)
            _, single = _admit_what_fits(kube, [alone], 4)
            _done_with(kube, admin, alone)
            deep_teams = [team(f"deep{i}", 4) for i in range(4)]
            for t in deep_teams:
                reconcile_tenant(kube, t.pk)
            print(f"deep queue: 4 teams x {DEEP} Jobs ...", flush=True)
            creating, deep = _admit_what_fits(kube, deep_teams, DEEP)
        finally:
            for tenant in tenants:
                kube.delete("Namespace", tenant.namespace)
                kube.delete("ClusterQueue", tenant.namespace)

    print()
    print(f"Deep queue: {4 * DEEP} Jobs queued over 4 teams; 16 fit")
    print(f"{'time to admit what fits, s':<44} {deep:>8.1f}")
    print(f"{'of which creating the 300 Jobs, s':<44} {creating:>8.1f}")
    print(f"{'one team, 4 Jobs, nothing else queued, s':<44} {single:>8.1f}")
    print(f"{'ratio deep / alone':<44} {deep / single:>8.2f}")
    return 0
