"""The portal's own stages at scale, without the cluster (`python -m bench --only stages`): the
reconcile's desired state and its no-op plan for 1,000 then 10,000 teams, the workload sync over
a stand-in gateway, metering's ingest of N pods and the team and queues pages, at 5,000, 20,000
and 50,000 workloads, in a throwaway PostgreSQL database. Each stage's wall time and queries per
size, and its slope between the smallest and largest size (issue 55, 3: what grows faster than
linearly is found by a profile, not a guess); `--profile DIR` writes a cProfile per stage."""

from __future__ import annotations

import cProfile
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import cast

from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench import scale_world
from bench.scale_report import Measure, percentile, table
from metering import ingest
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster, Node, TenantSyncState
from scheduler.cluster.reconcile.converge import key_str
from scheduler.cluster.reconcile.runs import _unchanged
from scheduler.cluster.reconcile.specs import build_specs
from scheduler.cluster.render.labels import HASH_ANNOTATION, TENANT_LABEL
from scheduler.cluster.render.tenant import render_tenant
from scheduler.workloads.lifecycle import side_by_side, watching
from scheduler.workloads.models import Workload
from tenants.models import Tenant

DB_NAME = "gpu_portal_scale_stages"  # not the suite's, not the other benches'
SYNC_SAMPLE = 300  # workloads synced per measure: their cost per workload is the figure
PAGE_REPEATS = 20
LOCAL_CACHE = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}


class Stages:
    def __init__(self, profile_dir: Path | None) -> None:
        self.measures: list[Measure] = []
        self.profile_dir = profile_dir

    def time(self, stage: str, size: int, fn: Callable[[], str | None], repeats: int = 1):
        """Run `fn` `repeats` times; keep the median wall time and the queries of one run."""
        walls, queries, note = [], 0, ""
        for i in range(repeats):
            profiler = cProfile.Profile() if self.profile_dir and i == 0 else None
            with CaptureQueriesContext(connection) as captured:
                t0 = time.perf_counter()
                if profiler:
                    profiler.enable()
                note = fn() or ""
                if profiler:
                    profiler.disable()
                walls.append(time.perf_counter() - t0)
            queries = len(captured.captured_queries)
            if profiler and self.profile_dir is not None:
                self.profile_dir.mkdir(parents=True, exist_ok=True)
                slug = "".join(c if c.isalnum() else "_" for c in stage)
                profiler.dump_stats(self.profile_dir / f"{slug}-{size}.prof")
        m = Measure(stage, size, statistics.median(walls), queries, note)
        self.measures.append(m)
        print(f"  {stage} @ {size}: {m.seconds:.3f} s, {queries} queries {note}", flush=True)
        return m


def _desired_state() -> tuple[dict, list]:
    tenants = list(Tenant.objects.exclude(status=Tenant.Status.ARCHIVED))
    specs = build_specs(tenants)
    return specs, [render_tenant(specs[t.pk]) for t in tenants]


def _mark_applied(tenants: list[Tenant], rendered: list[list[dict]]) -> None:
    """Every team in sync with what it renders now: the no-op run's starting point."""
    states = {s.tenant_id: s for s in TenantSyncState.objects.all()}
    for tenant, docs in zip(tenants, rendered, strict=True):
        states[tenant.pk].status = TenantSyncState.Status.IN_SYNC
        states[tenant.pk].applied_hashes = {
            key_str(d): d["metadata"]["annotations"][HASH_ANNOTATION] for d in docs
        }
    TenantSyncState.objects.bulk_update(
        states.values(), ["status", "applied_hashes"], batch_size=2000
    )


def reconcile_stages(st: Stages, teams: int) -> None:
    st.time("reconcile: build_specs + render_tenant", teams, lambda: _desired_state() and None)
    tenants = list(Tenant.objects.exclude(status=Tenant.Status.ARCHIVED))
    specs, rendered = _desired_state()
    _mark_applied(tenants, rendered)

    def noop() -> str:
        # what reconcile_all does per team once the cluster is listed: live == desired
        specs = build_specs(tenants)
        states = {s.tenant_id: s for s in TenantSyncState.objects.all()}
        same = sum(
            _unchanged(t, specs[t.pk], docs, states.get(t.pk))
            for t, docs in zip(tenants, rendered, strict=True)
        )
        return f"{same}/{len(tenants)} unchanged"

    st.time("reconcile: no-op plan (specs, states, plans)", teams, noop)


def sync_stages(st: Stages, workloads: int) -> None:
    world = scale_world.World.of_workloads()
    # the door's calls, answered from the world: typed as the door the sync expects
    kube = cast(KubeGateway, scale_world.StandInGateway(world))
    first = Tenant.objects.order_by("slug").first()
    assert first is not None, "the world has no team"
    big = first.namespace
    for label, rows in (
        ("big team's namespace", Workload.objects.filter(namespace=big)),
        ("spread namespaces", Workload.objects.exclude(namespace=big)),
    ):
        sample = list(rows.order_by("pk").values_list("pk", "namespace")[:SYNC_SAMPLE])
        side_by_side.sync_each(kube, sample)  # first pass records the places in the queues

        def again(sample=sample) -> str:
            _, failed = side_by_side.sync_each(kube, sample)
            return f"{len(sample)} synced, {len(failed)} failed"

        st.time(f"workload sync, {SYNC_SAMPLE} of the {label}", workloads, again)
    live = list(Workload.objects.live().values_list("pk", "namespace", "k8s_name", "k8s_uid"))
    changed = [
        {"type": "MODIFIED", "object": obj}
        for (kind, _), objs in world.objects.items()
        if kind in ("KueueWorkload", "Event")
        for n, obj in enumerate(objs.values())
        if n % 100 == 0
    ]

    def touched() -> str:
        found = watching.touched_workloads(
            {"KueueWorkload": changed, "Event": changed},
            (watching.LiveRef(*row) for row in live),
        )
        return f"{len(found.ids)} touched"

    st.time("workload sync: map 1 % changed (pure)", workloads, touched, repeats=3)
    queued = {ns for _, ns, _, _ in live[:: max(1, len(live) // 50)]}
    st.time("workload sync: refresh queue places", workloads,
            lambda: watching.refresh_queue_positions(kube, sorted(queued), {}, set()))  # fmt: skip


def metering_stages(st: Stages, workloads: int, start) -> None:
    """A cluster of its own per size: each size's first snapshot opens every interval."""
    world = scale_world.World.of_workloads()
    pods = world.pods()
    namespaces = [
        {"metadata": {"name": t.namespace, "labels": {TENANT_LABEL: t.slug}}}
        for t in Tenant.objects.all()
    ]
    cluster, _ = Cluster.objects.get_or_create(name=f"scale-{workloads}")
    Node.objects.bulk_create(
        (
            Node(cluster=cluster, name=f"scale-node-{i:03d}", gpu_model="H100-80GB", gpu_count=8,
                 last_seen_at=timezone.now())
            for i in range(200)
        ),
        ignore_conflicts=True,
    )  # fmt: skip

    def snapshot(minute: int) -> Callable[[], str]:
        def one() -> str:
            r = ingest.record_snapshot(
                pods=pods, namespaces=namespaces, list_nodes=list, prometheus_url="",
                cluster_name=cluster.name, now=start + timedelta(minutes=minute),
            )  # fmt: skip
            return f"{r.pods} pods, {r.opened} opened, {r.samples} samples"

        return one

    st.time(f"metering: record_snapshot, {len(pods)} pods, first", workloads, snapshot(0))
    st.time(f"metering: record_snapshot, {len(pods)} pods, steady", workloads, snapshot(1))


def page_stages(st: Stages, size: int) -> None:
    admin = scale_world.platform_admin()
    big = Tenant.objects.order_by("slug").first()
    assert big is not None, "the world has no team"
    owner = big.memberships.get(role="owner").user
    for label, user, url in (
        ("team page (big team)", owner, f"/teams/{big.slug}/"),
        ("console queues page", admin, "/console/queues/"),
    ):
        client = Client()
        client.force_login(user)
        assert client.get(url).status_code == 200, url
        samples: list[float] = []

        def repeat(client=client, url=url, samples=samples) -> str:
            for _ in range(PAGE_REPEATS):
                t0 = time.perf_counter()
                response = client.get(url)
                samples.append(time.perf_counter() - t0)
            return f"p95 {percentile(samples, 95) * 1000:.0f} ms, {len(response.content)} bytes"

        st.time(f"{label}, {PAGE_REPEATS} requests", size, repeat)


def run(*, tenants: list[int], workloads: list[int], profile_dir: Path | None = None) -> int:
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = DB_NAME
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    st = Stages(profile_dir)
    start = timezone.now().replace(second=0, microsecond=0)
    try:
        with override_settings(CACHES=LOCAL_CACHE, PROMETHEUS_URL="", ALLOWED_HOSTS=["testserver"]):
            seeded = 0
            for n in sorted(tenants):
                print(f"seeding teams {seeded}..{n} ...", flush=True)
                scale_world.seed_tenants(seeded, n)
                seeded = n
                reconcile_stages(st, n)
                if n == min(tenants):
                    made = 0
                    for w in sorted(workloads):
                        print(f"seeding workloads {made}..{w} over {n} teams ...", flush=True)
                        scale_world.seed_workloads(made, w, n)
                        made = w
                        sync_stages(st, w)
                        metering_stages(st, w, start)
                        page_stages(st, w)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    print()
    print("Portal stages without the cluster, PostgreSQL only")
    print(table(st.measures))
    return 0
