"""Follow N live workloads of mixed origin on the local cluster: the full per-namespace sync
(five lists a namespace; three and a GET a workload before issue 55; the periodic sync before
issue 14 and its full resync now) next to the change-driven periodic sync (a watch per kind
from cursors in PostgreSQL), with nothing changed and with 1 % of the workloads changed, in the
same run.

Goals (issues 14 and 48): with nothing changed, one call per watched kind whatever N; with 1 %
changed, at most 5 % of the full sync's calls. A third of the workloads are the portal's own
(suspended Jobs with its labels), a third Jobs and a third Deployments (at 0 replicas) made as
a team's kubectl would, each with the Kueue Workload Kueue keeps for it (owned by its object,
labelled with its uid), which is all the sync sees change of such work. All in namespaces Kueue
does not manage (created through the gateway; they make no pods), their rows in a throwaway
database; the namespaces are deleted at the end.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from kubernetes import client

from localcluster import cluster
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.render.labels import INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL
from scheduler.workloads.kinds.manifests import KUEUE_JOB_UID_LABEL, queue_wait
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.lifecycle import side_by_side, watching
from scheduler.workloads.models import Workload
from tenants.models import Tenant

INSTANCE = "wsbench"
NAMESPACES = 5
PARALLEL = 16  # concurrent creates: the local API server takes them faster than one by one


def _job(name: str, namespace: str, workload_id: int) -> dict:
    labels = {
        MANAGED_BY_LABEL: MANAGED_BY,
        INSTANCE_LABEL: INSTANCE,
        WORKLOAD_LABEL: str(workload_id),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "suspend": True,  # no pods: the fleet costs the API server objects, not kubelets
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
    }


ORIGINS = ("", "Job", "Deployment")  # the portal's own, then as a team's kubectl makes them


def _kubectl_object(w: Workload) -> dict:
    """A Job or Deployment with no label of the portal's."""
    template = {
        "metadata": {"labels": {"app": w.k8s_name}},
        "spec": {
            "restartPolicy": "Never" if w.owner_kind == "Job" else "Always",
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    meta = {"name": w.k8s_name, "namespace": w.namespace}
    if w.owner_kind == "Job":
        spec: dict = {"suspend": True, "template": template}
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
    spec = {"replicas": 0, "selector": {"matchLabels": {"app": w.k8s_name}}, "template": template}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


def _queue_workload(w: Workload, owner: dict) -> dict:
    """The Kueue Workload Kueue keeps for a team's object (its job-uid label, owned by it)."""
    uid = owner["metadata"]["uid"]
    template = _kubectl_object(w)["spec"]["template"]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"{w.owner_kind.lower()}-{w.k8s_name}",
            "namespace": w.namespace,
            "labels": {KUEUE_JOB_UID_LABEL: uid},
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": w.owner_kind,
                    "name": w.k8s_name,
                    "uid": uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "queueName": "default",
            "podSets": [{"name": "main", "count": 1, "template": template}],
        },
    }


def _create(kube: KubeGateway, w: Workload) -> None:
    if not w.owner_kind:
        kube.create(_job(w.k8s_name, w.namespace, w.pk))
        return
    made = kube.create(_kubectl_object(w))
    # the gateway names Kueue's kind KueueWorkload (Workload is ambiguous); create it plainly
    client.CustomObjectsApi(kube.api).create_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", w.namespace, "workloads", _queue_workload(w, made)
    )
    Workload.objects.filter(pk=w.pk).update(k8s_uid=made["metadata"]["uid"])


def _seed(kube: KubeGateway, n: int) -> list[Workload]:
    user = get_user_model().objects.create(username="wsbench")
    steady = queue_wait(None)
    now = timezone.now()
    namespaces = [f"wsbench-{i}" for i in range(NAMESPACES)]
    tenants = Tenant.objects.bulk_create(
        Tenant(slug=f"wsbench-{i}", name=f"Bench team {i}") for i in range(NAMESPACES)
    )
    rows = Workload.objects.bulk_create(
        Workload(
            tenant=tenants[i % NAMESPACES],
            name=f"w{i:05d}",
            kind=Workload.Kind.DEPLOYMENT
            if ORIGINS[i % len(ORIGINS)] == "Deployment"
            else Workload.Kind.JOB,
            image="registry.k8s.io/pause:3.10",
            resources={"h100-80gb-mig-3g.40gb": 1},
            gpu_model="H100-80GB",
            priority_class="gpu-low",
            # what the sync reads of a suspended Job that no queue has taken in: steady state
            state=steady.state,
            reason=steady.reason,
            message=steady.message,
            namespace=namespaces[i % NAMESPACES],
            k8s_name=f"w{i:05d}",
            owner_kind=ORIGINS[i % len(ORIGINS)],
            submitted_by=None if i % len(ORIGINS) else user,
            cluster_created_at=now,
        )
        for i in range(n)
    )
    for ns in namespaces:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(lambda w: _create(kube, w), rows))
    connection.close()  # the pool's threads had their own; this one is the bench's again
    return list(Workload.objects.filter(pk__in=[w.pk for w in rows]))


def _change(kube: KubeGateway, w: Workload) -> None:
    """What the sync sees change: the portal's Job itself, or the Kueue Workload of a team's."""
    patch = {"metadata": {"annotations": {"bench": "1"}}}
    if w.owner_kind:
        kube.merge_patch(
            "KueueWorkload", f"{w.owner_kind.lower()}-{w.k8s_name}", patch, w.namespace
        )
    else:
        kube.merge_patch("Job", w.k8s_name, patch, w.namespace)


def _cleanup(kube: KubeGateway) -> None:
    for i in range(NAMESPACES):
        kube.delete("Namespace", f"wsbench-{i}")


def _measure(kube: KubeGateway, run) -> tuple[float, int, int, int]:
    """(wall s, API calls, GETs, workloads looked at) of one run."""
    calls, gets = kube.stats.total, kube.stats.calls[("get", "Job")]
    t0 = time.perf_counter()
    looked_at = run()
    return (
        time.perf_counter() - t0,
        kube.stats.total - calls,
        kube.stats.calls[("get", "Job")] - gets,
        looked_at,
    )


def _quiet(kube: KubeGateway, timeout: float = 120) -> None:
    """Periodic runs until one finds nothing changed (the Job controller has settled the new
    Jobs' status, the full resync has recorded every state)."""
    deadline = time.monotonic() + timeout
    while watching.sync_live_workloads(kube) and time.monotonic() < deadline:
        pass


def run(*, workloads: int) -> int:
    cluster.up()
    settings.PORTAL_INSTANCE = INSTANCE
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = "gpu_portal_wsync_bench"
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    kube = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))
    setup = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))  # its calls are not measured
    changed = max(1, workloads // 100)
    try:
        _cleanup(setup)
        for i in range(NAMESPACES):  # an earlier run's namespaces still terminating
            while setup.get("Namespace", f"wsbench-{i}") is not None:
                time.sleep(1)
        print(
            f"creating {workloads} workloads of mixed origin in {NAMESPACES} namespaces ...",
            flush=True,
        )
        t0 = time.perf_counter()
        rows = _seed(setup, workloads)
        created_s = time.perf_counter() - t0
        print(f"  created in {created_s:.1f} s; measuring ...", flush=True)
        results = [
            (
                "first run: cursors + full sync",
                _measure(kube, lambda: watching.sync_live_workloads(kube, full=True)),
            ),
            (
                "full per-namespace sync",
                _measure(kube, lambda: side_by_side.sync_all_live_workloads(kube)),
            ),
        ]
        with override_settings(SYNC_WORKLOADS_WIDE_FROM=1):  # what a fleet of many namespaces gets
            results.append(
                (
                    "full cluster-wide sync",
                    _measure(kube, lambda: side_by_side.sync_all_live_workloads(kube)),
                )
            )
        _quiet(kube)
        results.append(
            (
                "change-driven, nothing changed",
                _measure(kube, lambda: watching.sync_live_workloads(kube)),
            )
        )
        with ThreadPoolExecutor(PARALLEL) as pool:  # 1 %: a change the watch sees of each
            list(pool.map(lambda w: _change(setup, w), random.Random(14).sample(rows, changed)))
        results.append(
            (
                f"change-driven, 1 % changed ({changed})",
                _measure(kube, lambda: watching.sync_live_workloads(kube)),
            )
        )
    finally:
        _cleanup(setup)
        connection.creation.destroy_test_db(old_name, verbosity=0)
    full_s, full_calls, _, _ = results[1][1]
    _, quiet_calls, _, _ = results[3][1]
    one_s, one_calls, _, _ = results[4][1]
    print()
    print(
        f"Sync {workloads} live workloads in {NAMESPACES} namespaces on the local cluster: a"
        " third the portal's Jobs, a third kubectl Jobs, a third kubectl Deployments"
    )
    print(f"{'run':<36} {'wall s':>8} {'API calls':>10} {'GETs':>6} {'synced':>7}")
    for label, (secs, calls, gets, looked_at) in results:
        print(f"{label:<36} {secs:>8.2f} {calls:>10} {gets:>6} {looked_at:>7}")
    print()
    kinds = len(watching.watched_collections())
    checks = [
        ("calls, nothing changed", quiet_calls, f"= {kinds}", quiet_calls == kinds),
        (
            "calls, 1 % changed / full",
            one_calls / full_calls,
            "≤ 0.05",
            one_calls / full_calls <= 0.05,
        ),
        ("wall, 1 % changed / full", one_s / full_s, "—", True),
    ]
    print(f"{'ratio':<36} {'value':>8} {'goal':>10} {'met':>6}")
    for name, value, goal, ok in checks:
        shown = f"{value:>8.3f}" if isinstance(value, float) else f"{value:>8}"
        print(f"{name:<36} {shown} {goal:>10} {'yes' if ok else 'NO':>6}")
    print(
        f"(creating the {workloads} workloads took {created_s:.1f} s; a change-driven run lasts at "
        f"least its watch window, SYNC_WORKLOADS_WATCH_S = {settings.SYNC_WORKLOADS_WATCH_S} s)"
    )
    return 0
