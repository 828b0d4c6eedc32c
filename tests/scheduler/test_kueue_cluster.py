"""Kueue enforces and queues what the portal grants, on the real local cluster: whoever
submits (the portal or a member with kubectl), per GPU model, with borrowing and reclaim in the
cohort, priority within a team, and a grant's end lowering the queue."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from catalog import slices
from catalog.services import set_pool
from core.errors import ClusterError
from scheduler.cluster import queues
from scheduler.cluster.models import TenantSyncState
from scheduler.cluster.reconcile.converge import managed_selector
from scheduler.cluster.reconcile.runs import reconcile_cluster_objects, reconcile_tenant
from scheduler.cluster.reconcile.specs import tenant_namespace
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.models import Workload, WorkloadEvent
from scheduler.workloads.submit.spec import workload_spec
from tenants.services.grants import expire_grants, grant_quota
from tenants.services.tenants import add_member, create_tenant
from tests.scheduler.cluster_helpers import (
    as_user,
    restricted_pod,
    unique_slug,
    wait_for,
    wait_until_refused,
)
from tests.tenants.factories import PoolFactory, ResourceClassFactory

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

MIG = "nvidia.com/mig-3g.40gb"
SLICES = slices.SLICE_RESOURCE  # what Kueue counts every GPU resource in (3g: 3)
A100 = "NVIDIA-A100-SXM4-80GB"


@pytest.fixture
def h100_mig(world):
    rc = ResourceClassFactory(
        slug="h100-80gb-mig-3g.40gb", gpu_model="H100-80GB", resource_name=MIG
    )
    PoolFactory(resource_class=rc, capacity=16)
    return rc


def team(world, kube, tenant_namespaces, rc, units, *, prefix="kq", classes=("gpu-low",)):
    tenant = create_tenant(
        actor=world.admin,
        slug=unique_slug(prefix),
        name=prefix,
        allowed_priority_classes=list(classes),
    )
    tenant_namespaces.append(tenant_namespace(tenant))
    add_member(actor=world.admin, tenant=tenant, username=world.member.username, role="member")
    if units:
        grant_quota(actor=world.admin, tenant=tenant, resource_class=rc, amount=units)
    reconcile_cluster_objects(kube)
    reconcile_tenant(kube, tenant.pk)
    tenant.refresh_from_db()
    wait_for("queue active", lambda: queue_active(kube, tenant.namespace), timeout=30)
    return tenant


def queue_active(kube, name):
    cq = kube.get("ClusterQueue", name) or {}
    return any(
        c["type"] == "Active" and c["status"] == "True"
        for c in (cq.get("status") or {}).get("conditions") or []
    )


def submit(kube, world, tenant, rc, units=1, name="train", priority="gpu-low"):
    w = workloads.submit_workload(
        actor=world.admin,
        tenant=tenant,
        spec=workload_spec(
            name=name,
            kind="job",
            image="registry.k8s.io/pause:3.10",
            resources={rc.slug: units},
            priority=priority,
        ),
    )
    workload_sync.create_in_cluster(kube, w.pk)
    return w


def wait_state(kube, workload, state, timeout=60, reason=None):
    """The workload synced until it is in `state` (and, given one, Kueue says `reason`): a
    workload is queued before Kueue's scheduler has tried it, so its reason comes later."""
    seen = []

    def check():
        w = workload_sync.sync_workload(kube, workload.pk)
        seen[:] = [(w.state, w.reason, w.message)]
        return w if w.state == state and reason in (None, w.reason) else None

    try:
        return wait_for(f"workload {workload.name} {state} {reason or ''}", check, timeout=timeout)
    except AssertionError as exc:  # say where it got stuck, and who holds the cohort's units
        raise AssertionError(
            f"{exc}; last seen {seen}; cohort: {cohort_usage(kube, workload.namespace)}"
        ) from None


def cohort_usage(kube, queue_name):
    """What every ClusterQueue in `queue_name`'s cohort reserves, whether it is being deleted."""
    cohort = ((kube.get("ClusterQueue", queue_name) or {}).get("spec") or {}).get("cohortName")
    out = []
    for cq in kube.list("ClusterQueue"):
        if cq["spec"].get("cohortName") != cohort:
            continue
        used = [
            f"{f['name']}/{r['name']}={r.get('total')}(borrowed {r.get('borrowed')})"
            for f in (cq.get("status") or {}).get("flavorsReservation") or []
            for r in f.get("resources") or []
            if r["name"].startswith("nvidia.com/") and r.get("total") not in (None, "0")
        ]
        deleting = " deleting" if cq["metadata"].get("deletionTimestamp") else ""
        out.append(f"{cq['metadata']['name']}{deleting}: {', '.join(used) or 'none'}")
    return f"{cohort} [{'; '.join(out)}]"


def member_job(name, resources, node_selector=None, node_name=None):
    pod = restricted_pod(name, resources)
    if node_selector:
        pod["spec"]["nodeSelector"] = node_selector
    if node_name:
        pod["spec"]["nodeName"] = node_name
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": pod["spec"]}},
    }


def test_a_member_with_kubectl_cannot_spend_a_grant_on_another_gpu_model(
    kube, kube_cluster, tenant_namespaces, world, h100_mig
):
    tenant = team(world, kube, tenant_namespaces, h100_mig, 1)
    ns = tenant.namespace
    member = as_user(kube_cluster, world.member.username)

    # A Job with no queue label, pinned to the A100 node's model: Kueue takes it in anyway and
    # holds it, since the team's quota is on the H100 flavor only.
    job = member_job("pinned", {MIG: 1}, node_selector={"nvidia.com/gpu.product": A100})
    job["metadata"]["namespace"] = ns
    created = member.create(job)
    assert created["spec"]["suspend"] is True
    assert created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"

    def held():
        uid = created["metadata"]["uid"]
        queued = kube.list("KueueWorkload", ns, label_selector=f"kueue.x-k8s.io/job-uid={uid}")
        for w in queued:
            for c in w.get("status", {}).get("conditions") or []:
                if c["type"] == "QuotaReserved" and c["status"] == "False":
                    return c["message"]
        return None

    message = wait_for("the pinned job held by Kueue", held, timeout=30)
    # the team's queue lists only the H100 flavor it has quota on
    assert "flavor h100-80gb doesn't match node affinity" in message
    # a bare pod pinned the same way waits behind Kueue's gate and is never bound
    pod = restricted_pod("bare", {MIG: 1})
    pod["metadata"]["namespace"] = ns
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": A100}
    bare = member.create(pod)
    gates = [g["name"] for g in bare["spec"].get("schedulingGates") or []]
    assert gates == ["kueue.x-k8s.io/admission"]
    # (first: it waits until the API server enforces the policy the reconcile just wrote,
    # which takes a moment on a fresh cluster)
    # queueing at a priority the pods do not carry (gpu-critical without the allowance)
    jumper = member_job("jumper", {MIG: 1})
    jumper["metadata"].update(
        namespace=ns, labels={"kueue.x-k8s.io/priority-class": "gpu-critical"}
    )
    wait_until_refused(
        member, jumper, "must name the same priority class", "the queue guard policy in force"
    )
    # what Kueue alone would leave open is refused by the portal's admission policy
    with pytest.raises(ClusterError, match="only Kueue lifts its scheduling gate"):
        member.merge_patch("Pod", "bare", {"spec": {"schedulingGates": None}}, ns)
    with pytest.raises(ClusterError, match="only Kueue starts a suspended Job"):
        member.merge_patch("Job", "pinned", {"spec": {"suspend": False}}, ns)
    with pytest.raises(ClusterError, match="must name the same priority class"):
        member.create(jumper)
    named = member_job("by-name", {MIG: 1}, node_name="gpu-a100-0")
    named["metadata"]["namespace"] = ns
    with pytest.raises(ClusterError, match="may not name a node"):
        member.create(named)
    naked = restricted_pod("naked", {MIG: 1})
    naked["metadata"]["namespace"] = ns
    naked["spec"]["nodeName"] = "gpu-a100-0"
    with pytest.raises(ClusterError):
        member.create(naked)
    # after all that: no pod of the team was ever bound to a node
    pods = kube.list("Pod", ns)
    assert [p["metadata"]["name"] for p in pods] == ["bare"]
    assert not pods[0]["spec"].get("nodeName")
    assert held()  # still held


def test_a_team_borrows_idle_slices_and_the_lender_reclaims_them(
    kube, tenant_namespaces, world, h100_mig, settings
):
    # a cohort of its own: queues other tests leave behind (or still deleting) would lend too
    settings.PORTAL_INSTANCE = unique_slug("cohort")
    # Kueue's own reclaim, at once (the portal's reclaim after a grace: test_reclaim_cluster)
    set_pool(actor=world.admin, resource_class=h100_mig, borrowing_limit=4, reclaim_grace_s=0)
    lender = team(world, kube, tenant_namespaces, h100_mig, 4, prefix="lend")
    borrower = team(world, kube, tenant_namespaces, h100_mig, 0, prefix="borrow")

    # the borrower has no grant of its own but may borrow 4 x 3g (12 compute slices): its job
    # runs on the lender's idle slices
    borrowed = submit(kube, world, borrower, h100_mig, units=3, name="borrowed")
    wait_state(kube, borrowed, "running")

    def borrowed_units():  # Kueue updates the queue's status a moment after admitting
        cq = kube.get("ClusterQueue", borrower.namespace)
        usage = {
            (f["name"], r["name"]): r
            for f in cq["status"].get("flavorsUsage") or []
            for r in f["resources"]
        }
        return usage.get(("h100-80gb", SLICES), {}).get("borrowed") == "9"

    wait_for("9 slices (3 x 3g) borrowed in the borrower's queue", borrowed_units, timeout=30)
    # the pages read it from PostgreSQL; an unchanged queue is not written again
    queues.sync_queue_status(kube, managed_selector())
    lines = {
        t.slug: TenantSyncState.objects.get(tenant=t).queue_status["lines"]
        for t in (lender, borrower)
    }
    assert lines[borrower.slug] == [
        {
            "flavor": "h100-80gb",
            "resource": SLICES,
            "nominal": 0,
            "used": 9,
            "borrowed": 9,
            "lent": 0,
        }
    ]
    assert lines[lender.slug][0]["lent"] == 9 and lines[lender.slug][0]["nominal"] == 12
    with CaptureQueriesContext(connection) as queries:
        queues.sync_queue_status(kube, managed_selector())
    assert not [q for q in queries if q["sql"].startswith(("UPDATE", "INSERT"))]

    # the lender needs them back: Kueue preempts the borrower, whose job waits again
    own = submit(kube, world, lender, h100_mig, units=4, name="own")
    wait_state(kube, own, "running", timeout=90)
    borrowed = wait_state(kube, borrowed, "queued", timeout=90)
    assert borrowed.reason == "Preempted" and "queued again" in borrowed.message
    states = list(WorkloadEvent.objects.filter(workload=borrowed).values_list("state", flat=True))
    assert states[-3:] == ["running", "preempted", "queued"]
    job = kube.get("Job", borrowed.k8s_name, borrowed.namespace)
    assert job["spec"]["suspend"] is True  # requeued, not lost


def test_within_a_team_high_priority_is_admitted_before_older_low_priority(
    kube, tenant_namespaces, world, h100_mig
):
    tenant = team(
        world, kube, tenant_namespaces, h100_mig, 1, prefix="prio", classes=("gpu-high", "gpu-low")
    )
    first = submit(kube, world, tenant, h100_mig, name="first")
    wait_state(kube, first, "running")
    older = submit(kube, world, tenant, h100_mig, name="older-low")

    def held_for_quota():  # queued at once; Kueue's reason follows its first attempt
        w = workload_sync.sync_workload(kube, older.pk)
        return w if w.state == "queued" and "insufficient" in w.message else None

    older = wait_for("older-low queued for want of quota", held_for_quota, timeout=60)
    assert older.queue_position == 1
    urgent = submit(kube, world, tenant, h100_mig, name="urgent", priority="gpu-high")
    wait_state(kube, urgent, "running", timeout=90)  # it preempts the running low one
    assert wait_state(kube, older, "queued").state == "queued"
    first = wait_state(kube, first, "queued")
    assert first.reason == "Preempted"


def test_a_grant_that_ends_lowers_the_queue_within_one_reconcile(
    kube, tenant_namespaces, world, h100_mig
):
    tenant = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="exp")
    grant_quota(
        actor=world.admin,
        tenant=tenant,
        resource_class=h100_mig,
        amount=2,
        ends_at=timezone.now() + timedelta(hours=1),
    )
    reconcile_tenant(kube, tenant.pk)

    def nominal():
        cq = kube.get("ClusterQueue", tenant.namespace)
        gpus = cq["spec"]["resourceGroups"][1]
        h100 = next(f for f in gpus["flavors"] if f["name"] == "h100-80gb")
        return next(r for r in h100["resources"] if r["name"] == SLICES)["nominalQuota"]

    assert nominal() == "9"  # 3 x 3g, in compute slices
    running = submit(kube, world, tenant, h100_mig, units=3, name="big")
    wait_state(kube, running, "running")
    expire_grants(now=timezone.now() + timedelta(hours=2))
    reconcile_tenant(kube, tenant.pk)
    assert nominal() == "3"
    # Kueue leaves admitted work running above a lowered quota (it never evicts for that);
    # new work waits until the team is back under it.
    assert wait_state(kube, running, "running").state == "running"
    late = submit(kube, world, tenant, h100_mig, name="late")
    wait_state(kube, late, "queued", reason="WaitingForQuota")


def test_with_kueue_stopped_submits_wait_queued_and_run_when_it_is_back(
    kube, tenant_namespaces, world, h100_mig, settings
):
    from localcluster import build, cluster, components

    # a cohort of its own: other tests' queues (or ones still being deleted) may borrow the
    # team's idle unit while Kueue is down, and its job would wait for them to finish
    settings.PORTAL_INSTANCE = unique_slug("down")
    tenant = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="down")
    kueue = next(c for c in components.component_specs(build.binaries()) if c.name == "kueue")
    cluster.stop(kueue)
    try:
        w = workloads.submit_workload(
            actor=world.admin,
            tenant=tenant,
            spec=workload_spec(
                name="during",
                kind="job",
                image="registry.k8s.io/pause:3.10",
                resources={h100_mig.slug: 1},
                priority="gpu-low",
            ),
        )
        # its webhook is down: the API server refuses the Job for now; the workload waits
        with pytest.raises(ClusterError):
            workload_sync.create_in_cluster(kube, w.pk)
        w.refresh_from_db()
        assert (w.state, w.reason) == ("queued", "WaitingForCluster")
        assert kube.get("Job", w.k8s_name, w.namespace) is None
    finally:
        cluster.up()
    # back: its webhooks answer and, once its caches are synced, the team's queue is active
    wait_for("queue active again", lambda: queue_active(kube, tenant.namespace), timeout=60)
    wait_for("created", lambda: workload_sync.create_in_cluster(kube, w.pk).cluster_created_at)
    wait_state(kube, w, "running", timeout=120)
    assert Workload.objects.filter(tenant=tenant).count() == 1  # nothing lost, nothing doubled


def test_a_deployment_beyond_what_is_free_runs_what_fits_and_waits_for_the_rest(
    kube, tenant_namespaces, world, h100_mig, settings
):
    """Deployments go through Kueue's pod integration: each pod is admitted on its own. A
    replica beyond the team's quota is not even created (the ResourceQuota backstop counts
    gated pods too), so its ReplicaSet retries; the workload says it waits, and the replica
    runs once the room is there."""
    # a cohort of its own: queues of earlier tests still being deleted would borrow the team's
    # idle units the moment its queue joins theirs, and keep them until their namespaces go
    settings.PORTAL_INSTANCE = unique_slug("dep")
    tenant = team(world, kube, tenant_namespaces, h100_mig, 2, prefix="dep")
    first = workloads.submit_workload(
        actor=world.admin,
        tenant=tenant,
        spec=workload_spec(
            name="serve",
            kind="deployment",
            image="registry.k8s.io/pause:3.10",
            resources={h100_mig.slug: 1},
            priority="gpu-low",
        ),
    )
    workload_sync.create_in_cluster(kube, first.pk)
    wait_state(kube, first, "running")
    second = workloads.submit_workload(
        actor=world.admin,
        tenant=tenant,
        spec=workload_spec(
            name="more",
            kind="deployment",
            replicas=2,
            image="registry.k8s.io/pause:3.10",
            resources={h100_mig.slug: 1},
            priority="gpu-low",
        ),
    )
    workload_sync.create_in_cluster(kube, second.pk)

    def partly():
        w = workload_sync.sync_workload(kube, second.pk)
        waiting = "1/2 running; 1 waiting for room in the team's quota"
        return (
            w if (w.state, w.reason, w.message) == ("running", "PartlyRunning", waiting) else None
        )

    wait_for("one of two replicas running, one waiting for room", partly, timeout=60)
    workloads.cancel_workload(actor=world.admin, workload=first)
    workload_sync.delete_from_cluster(kube, first.pk)

    def all_running():
        w = workload_sync.sync_workload(kube, second.pk)
        return w if w.reason == "Running" else None

    assert wait_for("the second replica admitted", all_running, timeout=120).state == "running"


def test_flavors_other_portal_instances_use_are_never_pruned(kube, world):
    """Portals sharing a cluster converge the same cluster-wide objects; one that knows fewer
    GPU models must not delete the flavor another's queues name."""
    other = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {
            "name": "b200-180gb-test",
            "labels": {"app.kubernetes.io/managed-by": "gpu-portal"},
        },
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-B200"}},
    }
    kube.apply(other)
    try:
        outcome = reconcile_cluster_objects(kube)
        assert not any("b200" in change for change in outcome.changes)
        assert kube.get("ResourceFlavor", "b200-180gb-test") is not None
        assert kube.get("ResourceFlavor", "a100-80gb") is not None  # this instance's own
    finally:
        kube.delete("ResourceFlavor", "b200-180gb-test")
