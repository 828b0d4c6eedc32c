"""Issue 53's fill measure: a mixed-shape queue (1g, 2g, 3g, 4g, whole GPU) on GPUs served through
DRA, against the same queue on layout GPUs of the same size, in one run.

- DRA: a KWOK node of 4 A100-40GB published as NVIDIA's DRA driver does (localcluster/dra_node.py):
  a placement is cut when the scheduler allocates a pod's claim.
- Layouts: the fleet's `gpu-a100-0`, 4 A100-80GB under the device plugin with its MIG layout cut
  ahead of time (`mixed`: 2 × 3g, 7 × 1g, 2 whole GPUs). Nothing re-shapes it during the run
  (the elastic layouts would drain a node to do so: the worker that runs them is not running).

Each side: one team granted 14 slices (two GPUs' worth) of its model, 10 × 14 slices of Jobs of
`sleep D` submitted through the portal's service path, the shapes in turn. While work waits, the
share of the 14 granted slices that run a pod (goal on DRA: ≥ 0.9), the makespan against the
ideal (10 × D), and the drains (a node seen cordoned) on each side.

"Work waits" means a Job of the queue neither running nor done: at the tail, when the last Jobs
run and nothing is left to start, idle slices are not the scheduler's to fill and are not
counted (counting them, as the first version did, charged the tail's emptiness to the
placement). Each Job costs the cluster's controllers about 2 s between one Job's end and the
next one's start (Kueue sees the end, frees the quota, admits; the Job controller makes the pod;
the scheduler allocates its claim): D is `--fill-run-s`, 10 s by default, and the longer D is,
the smaller that fixed cost is beside it.

Runs in a throwaway database with its own instance label and namespace prefix, and deletes what
it made at the end.
"""

from __future__ import annotations

import time

from bench.isolation import platform_admin, run_of_its_own, throwaway_database
from catalog import slices
from catalog.models import Pool, ResourceClass
from catalog.services import ensure_resource_classes
from localcluster import base as local_base
from localcluster import cluster, dra_node
from scheduler.cluster import node_offers
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.runs import reconcile_all
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import sync
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import Tenant
from tenants.services import grants as grant_services
from tenants.services import tenants as tenant_services

GRANT_SLICES = 14
RUN_S = 10.0
POLL_S = 0.5
DRA_NODE = "bench-dra-a100-40gb"
LAYOUT_NODE = "gpu-a100-0"  # the fleet's A100-80GB, MIG config `mixed`
SIDES = {
    # model, its node, the classes of the five shapes (slices: 1, 2, 3, 4, 7)
    "DRA": ("A100-40GB", DRA_NODE, ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", ""]),
    "layouts": ("A100-80GB", LAYOUT_NODE, ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", ""]),
}


def _class(model: str, profile: str) -> ResourceClass:
    kind = "mig" if profile else "whole"
    return ResourceClass.objects.get(gpu_model=model, kind=kind, profile=profile)


def _queue(model: str, profiles: list[str]) -> list[ResourceClass]:
    """The shapes in turn until they add up to 10 × the grant's slices."""
    shapes = [_class(model, p) for p in profiles]
    out: list[ResourceClass] = []
    while sum(slices.slices_per_unit(rc) for rc in out) < 10 * GRANT_SLICES:
        out.append(shapes[len(out) % len(shapes)])
    return out


def _side(  # noqa: PLR0913 (one side's whole set-up)
    kube: KubeGateway, admin, team: Tenant, queue: list[ResourceClass], node: str, run_s: float
) -> dict:
    per_job = {}
    t0 = time.monotonic()
    for i, rc in enumerate(queue):
        w = workloads.submit_workload(
            actor=admin,
            tenant=team,
            spec=workload_spec(
                name=f"m{i}",
                kind="job",
                image="registry.k8s.io/pause:3.10",
                command=["sleep", f"{run_s:g}"],
                resources={rc.slug: 1},
                priority="gpu-low",
            ),
        )
        sync.create_in_cluster(kube, w.pk)
        w.refresh_from_db()
        per_job[w.k8s_name] = slices.slices_per_unit(rc)
    submitted = time.monotonic() - t0
    busy, drains = [], 0
    deadline = t0 + 10 * run_s * 3  # the layouts may never run some shapes
    done = 0
    while time.monotonic() < deadline:
        running = done = started = 0
        for pod in kube.list("Pod", team.namespace):
            phase = (pod.get("status") or {}).get("phase")
            job = (pod["metadata"].get("labels") or {}).get("job-name", "")
            if phase == "Running":
                running += per_job.get(job, 0)
                started += 1
            elif phase == "Succeeded":
                done += 1
        if done >= len(queue):
            break
        if len(queue) - done - started > 0:  # work waits: the grant's slices should be busy
            busy.append(min(running, GRANT_SLICES))
        drains += bool((kube.get("Node", node) or {}).get("spec", {}).get("unschedulable"))
        time.sleep(POLL_S)
    return {
        "jobs": len(queue),
        "submitted_s": submitted,
        "finished": done,
        "busy": sum(busy) / len(busy) / GRANT_SLICES if busy else 0.0,
        "makespan_s": time.monotonic() - t0,
        "drains": drains,
    }


def run(run_s: float = RUN_S, sides: tuple[str, ...] = tuple(SIDES)) -> int:
    cluster.up()
    cluster.fresh_kwok()  # pods end when asked, however long the cluster has run
    run_of_its_own("mfbench")
    kube = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))
    api = local_base.api_client()
    dra_node.ensure(api, "A100-40GB", 4, DRA_NODE)
    tenants: list[Tenant] = []
    results = {}
    with throwaway_database("gpu_portal_mixed_fill_bench"):
        try:
            ensure_resource_classes([m for m, _, _ in SIDES.values()])
            admin = platform_admin("mfbench-admin")
            for side in sides:
                model, node, profiles = SIDES[side]
                # the pools as the inventory would count 4 GPUs (DRA: what they could be cut
                # into; layouts: what the layout offers), each large enough for the grant
                for slug, units in node_offers.dra_units(model, 4).items():
                    Pool.objects.update_or_create(
                        resource_class=ResourceClass.objects.get(slug=slug),
                        defaults={"capacity": units},
                    )
                one_g = _class(model, profiles[0])
                tenant = tenant_services.create_tenant(
                    actor=admin, slug=f"mf-{side.lower()}", name=side,
                    allowed_priority_classes=["gpu-low"],
                )  # fmt: skip
                grant_services.grant_quota(
                    actor=admin, tenant=tenant, resource_class=one_g, amount=GRANT_SLICES
                )
                tenants.append(tenant)
                reconcile_all(kube, trigger="benchmark")
                print(f"mixed fill on {side}: {node} ...", flush=True)
                queue = _queue(model, profiles)
                results[side] = _side(kube, admin, tenant, queue, node, run_s)
                # its grant ends with it: the next side's reconcile leaves its namespace alone
                tenant_services.change_tenant_status(actor=admin, tenant=tenant, action="archive")
                kube.delete("Namespace", tenant.namespace)
                kube.delete("ClusterQueue", tenant.namespace)
        finally:
            for tenant in tenants:
                kube.delete("Namespace", tenant.namespace)
                kube.delete("ClusterQueue", tenant.namespace)
            dra_node.remove(api, DRA_NODE)
            api.close()
    print()
    print(
        f"Mixed fill: 1g, 2g, 3g, 4g, whole GPU in turn, 10 × {GRANT_SLICES} slices of "
        f"`sleep {run_s:g}` for a grant of {GRANT_SLICES} slices, 4 GPUs a side"
    )
    none = {"busy": float("nan"), "finished": "-", "makespan_s": float("nan"), "drains": "-"}
    dra, lay = (results.get(side, none) for side in SIDES)
    jobs = next(r["jobs"] for r in results.values())
    rows = [
        ("figure", "DRA", "layouts", "goal (DRA)"),
        ("slices busy while work waits / N", f"{dra['busy']:.2f}", f"{lay['busy']:.2f}", "≥ 0.90"),
        ("Jobs finished (of)", dra["finished"], lay["finished"], jobs),
        ("makespan s (ideal 10 × D)", f"{dra['makespan_s']:.1f}", f"{lay['makespan_s']:.1f}",
         f"{10 * run_s:.0f}"),
        ("polls with the node cordoned (drains)", dra["drains"], lay["drains"], 0),
    ]  # fmt: skip
    for name, a, b, goal in rows:
        print(f"{name:<40} {a!s:>10} {b!s:>10} {goal!s:>12}")
    if "DRA" in results:
        met = dra["busy"] >= 0.9 and dra["drains"] == 0
        print(f"goal on DRA: {'met' if met else 'NOT met'}", flush=True)
    return 0
