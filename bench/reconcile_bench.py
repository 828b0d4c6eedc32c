"""Reconcile N tenants onto the local cluster from empty, then again with nothing changed, next
to `kubectl apply --server-side` of the same rendered manifests (the floor) in the same run.

Goals (issues 4 and 12): cold ≤ 1.5 × floor; no-op run: 0 writes and ≤ 0.2 × the cold time.
Each tenant's objects include its Kueue ClusterQueue and LocalQueue.
Runs in a throwaway database and its own instance label and namespace prefixes, and deletes
every namespace it made at the end.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from bench import profile
from bench.isolation import cleaned_up_after, cluster_as_it_runs
from bench.scale_cpu import cpu_by_command, spent
from bench.scale_cpu import lines as cpu_lines
from catalog.models import ResourceClass
from catalog.services import ensure_resource_classes
from localcluster import build, cluster
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.runs import reconcile_all
from scheduler.cluster.reconcile.specs import build_specs
from scheduler.cluster.render.labels import INSTANCE_LABEL
from scheduler.cluster.render.specs import TenantSpec
from scheduler.cluster.render.tenant import render_tenant
from tenants.models import Membership, QuotaGrant, Tenant

MODELS = ["A100-80GB", "H100-80GB", "H200-141GB", "L40S-48GB", "RTX4090-24GB"]


def _seed(n: int) -> None:
    rng = random.Random(42)  # the same world every run
    ensure_resource_classes(MODELS)
    classes = list(ResourceClass.objects.all())
    User = get_user_model()
    users = User.objects.bulk_create(User(username=f"bench-user-{i}") for i in range(n * 2))
    tenants = Tenant.objects.bulk_create(
        Tenant(
            slug=f"t{i:04d}",
            name=f"Bench team {i}",
            allowed_priority_classes=["gpu-high", "gpu-low"],
        )
        for i in range(n)
    )
    now = timezone.now()
    grants, memberships = [], []
    for i, tenant in enumerate(tenants):
        for rc in rng.sample(classes, rng.randint(1, 4)):
            ends = now + timedelta(days=rng.randint(1, 90)) if rng.random() < 0.7 else None
            grants.append(
                QuotaGrant(
                    tenant=tenant,
                    resource_class=rc,
                    amount=rng.randint(1, 8),
                    starts_at=now,
                    ends_at=ends,
                )
            )
        memberships += [
            Membership(tenant=tenant, user=users[2 * i], role="owner"),
            Membership(tenant=tenant, user=users[2 * i + 1], role=rng.choice(["member", "viewer"])),
        ]
    QuotaGrant.objects.bulk_create(grants)
    Membership.objects.bulk_create(memberships)


def _floor(kube_path: str, kubectl: str) -> tuple[float, int]:
    """kubectl apply --server-side of the same manifests under other names (from empty)."""
    specs = build_specs(list(Tenant.objects.all()))
    docs = []
    for spec in specs.values():
        floor_spec = TenantSpec(
            **{**spec.__dict__, "namespace_prefix": "benchfloor-", "instance": "bench-floor"}
        )
        docs.extend(render_tenant(floor_spec))
    # JSON, not YAML: kubectl's YAML reader takes an unquoted hash such as 6e12… for a number.
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"apiVersion": "v1", "kind": "List", "items": docs}, fh)
    t0 = time.perf_counter()
    subprocess.run(
        [
            kubectl,
            f"--kubeconfig={kube_path}",
            "apply",
            "--server-side",
            "--field-manager=bench-floor",
            "-f",
            fh.name,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0, len(docs)


SELECTORS = (f"{INSTANCE_LABEL}=bench", f"{INSTANCE_LABEL}=bench-floor")


def _cleanup(kube: KubeGateway, *, wait: bool = False, stall_s: float = 300) -> None:
    """Delete the namespaces and queues a run made; with wait, until they are gone (so a run
    that follows another starts from empty, and the tests after the bench find the cluster as
    it was). 20,000 namespaces take the namespace controller far longer than a fixed wait:
    it waits as long as they keep going, and says so when they stop."""
    for selector in SELECTORS:
        for kind in ("Namespace", "ClusterQueue"):  # ClusterQueues are cluster-scoped
            names = [o["metadata"]["name"] for o in kube.list(kind, label_selector=selector)]
            with ThreadPoolExecutor(4) as pool:  # one at a time, 20,000 took minutes
                list(pool.map(lambda name, kind=kind: kube.delete(kind, name), names))
    last, moved, t0 = -1, time.monotonic(), time.monotonic()
    while wait:
        left = sum(len(kube.list("Namespace", label_selector=s)) for s in SELECTORS)
        if not left:
            if last > 0:
                print(f"  gone after {time.monotonic() - t0:.0f} s", flush=True)
            return
        if left != last:
            last, moved = left, time.monotonic()
            print(f"  waiting for {left} namespaces to go ...", flush=True)
        elif time.monotonic() - moved > stall_s:
            print(f"  {left} namespaces still there, none gone in {stall_s:.0f} s", flush=True)
            return
        time.sleep(15)


@contextmanager
def _measured(label: str, profile_dir: Path | None, tag: str):
    """Print where the machine's CPU went during a run (the portal's process, the API server,
    etcd, Kueue, the controller manager, ...): with 2 shared cores, this says which part
    limits the run's wall time. With a folder, py-spy samples this process meanwhile."""
    sampler = profile.start(os.getpid(), profile_dir, tag) if profile_dir else None
    t0, before = time.perf_counter(), cpu_by_command()
    try:
        yield
    finally:
        used, wall_s = spent(before, cpu_by_command()), time.perf_counter() - t0
        if sampler:
            profile.stop(sampler)
        print("\n".join("  " + line for line in cpu_lines(label, used, wall_s)), flush=True)
        if profile_dir:
            profile.report(profile_dir, tag)


def _one(
    kube: KubeGateway,
    kube_path: str,
    kubectl: str,
    tenants: int,
    *,
    floor: bool = True,
    profile_dir: Path | None = None,
) -> list[tuple]:
    """One size in a database of its own: [(run, wall s, API calls, writes)] for the cold run,
    the no-op run and (with floor) kubectl's floor."""
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = "gpu_portal_bench"  # not the test suite's
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        _cleanup(kube, wait=True)
        print(f"seeding {tenants} tenants with grants and members ...", flush=True)
        _seed(tenants)
        rows = []
        for label, tag in (("cold (from empty)", "cold"), ("no-op (nothing changed)", "noop")):
            calls, writes = kube.stats.total, kube.stats.writes
            t0 = time.perf_counter()
            with _measured(f"the {tag} run", profile_dir, f"reconcile-{tenants}-{tag}"):
                summary = reconcile_all(kube, trigger="benchmark")
            elapsed = time.perf_counter() - t0
            rows.append((label, elapsed, kube.stats.total - calls, kube.stats.writes - writes))
            print(
                f"  {label}: {elapsed:.1f} s, {summary.tenants} tenants, {summary.changed} changed,"
                f" {summary.skipped_busy} busy, {len(summary.failed)} failed {summary.failed[:3]}",
                flush=True,
            )
        if floor:
            with _measured("kubectl's floor", None, ""):
                floor_s, objects = _floor(kube_path, kubectl)
            rows.append(("kubectl apply --server-side", floor_s, objects, objects))
    finally:  # the namespaces go before the next size (from empty) or after the last
        connection.creation.destroy_test_db(old_name, verbosity=0)
    return rows


def _report(tenants: int, rows: list[tuple]) -> None:
    (_, cold, _, _), (_, noop, _, noop_writes), *floor = rows
    what = f"{floor[0][2]} objects" if floor else "kubectl's floor not run at this size"
    print()
    print(f"Reconcile {tenants} tenants ({what}) on the local cluster")
    print(f"{'run':<30} {'wall s':>8} {'API calls':>10} {'writes':>8}")
    for label, secs, calls, writes in rows:
        print(f"{label:<30} {secs:>8.2f} {calls:>10} {writes:>8}")
    print()
    checks = [
        ("no-op / cold", noop / cold, "≤ 0.20", noop / cold <= 0.2),
        ("no-op writes", noop_writes, "= 0", noop_writes == 0),
    ]
    if floor:
        floor_s = floor[0][1]
        checks.insert(0, ("cold / kubectl floor", cold / floor_s, "≤ 1.50", cold / floor_s <= 1.5))
    print(f"{'ratio':<30} {'value':>8} {'goal':>10} {'met':>8}")
    for name, value, goal, ok in checks:
        print(f"{name:<30} {value:>8.2f} {goal:>10} {'yes' if ok else 'NO':>8}")


def slope_checks(by_size: dict[int, list[tuple]]) -> list[tuple[str, float, str, bool]]:
    """Issue 55's goals between the smallest and the largest size (pure): the cold run grows
    no faster than the tenants (10,000 ≤ 10.5 × 1,000: 1.05 × the size ratio), the no-op run's
    API calls do not grow with them, and it writes nothing at the largest. kubectl's own slope
    where both sizes ran its floor."""
    lo, hi = min(by_size), max(by_size)
    (_, cold_lo, _, _), (_, _, calls_lo, _), *floor_lo = by_size[lo]
    (_, cold_hi, _, _), (_, _, calls_hi, writes_hi), *floor_hi = by_size[hi]
    limit = 1.05 * hi / lo
    checks = [
        (f"cold {hi} / cold {lo}", cold_hi / cold_lo, f"≤ {limit:.2f}", cold_hi / cold_lo <= limit),
        (f"no-op calls {hi} / {lo}", calls_hi / calls_lo, "= 1.00", calls_hi == calls_lo),
        (f"no-op writes at {hi}", writes_hi, "= 0", writes_hi == 0),
    ]
    if floor_lo and floor_hi:
        floor_slope = floor_hi[0][1] / floor_lo[0][1]
        checks.insert(1, (f"kubectl {hi} / kubectl {lo}", floor_slope, "(floor)", True))
    return checks


def run(
    *,
    tenants: int | list[int],
    floor_up_to: int | None = None,
    apply_threads: int | None = None,
    profile_dir: Path | None = None,
) -> int:
    """One size, or several (`--tenants 1000,10000`): each from empty, then the slope.
    kubectl's floor runs at the sizes up to `floor_up_to` (all by default): at 10,000 tenants
    its 120,000 objects beside the portal's need more memory than this machine's 23 GiB."""
    sizes = [tenants] if isinstance(tenants, int) else sorted(tenants)
    cluster_as_it_runs()
    settings.PORTAL_INSTANCE = "bench"
    settings.TENANT_NAMESPACE_PREFIX = "bench-"
    if apply_threads:
        settings.RECONCILE_APPLY_THREADS = apply_threads
    print(f"tenants converged at once: {settings.RECONCILE_APPLY_THREADS}", flush=True)
    kube_path = str(cluster.KUBECONFIG)
    kubectl = str(build.binaries()["kubectl"])
    kube = KubeGateway.from_kubeconfig(kube_path)
    # each size's figures as soon as they are measured: the last clean-up (20,000 namespaces
    # at 10,000 tenants) takes the namespace controller about an hour on this machine
    with cleaned_up_after(lambda: _cleanup(kube, wait=True)):
        by_size = {}
        for n in sizes:
            floor = floor_up_to is None or n <= floor_up_to
            by_size[n] = _one(kube, kube_path, kubectl, n, floor=floor, profile_dir=profile_dir)
            _report(n, by_size[n])
        if len(by_size) > 1:
            print()
            print(f"{'slope':<30} {'value':>8} {'goal':>10} {'met':>8}")
            for name, value, goal, ok in slope_checks(by_size):
                print(f"{name:<30} {value:>8.2f} {goal:>10} {'yes' if ok else 'NO':>8}")
            print(flush=True)
    return 0
