"""A fleet through the portal's own path, on two local clusters (issue 54, items 2 to 4): the
main cluster is the manager, the second (`kube_worker`, localcluster/worker.py) a worker the
platform team registered with its kubeconfig in a Secret.

A team whose grant is placed on "any worker of group burst" is reconciled by the portal's
tasks onto both clusters; its job, submitted through the portal, is admitted on the manager
and runs on the worker: its row says where, its pods and logs are read there, its cancel
removes it there. A member's kubectl Job in the manager's namespace goes the same way. A team
granted on the manager's own cluster runs there, and has nothing on the worker; one team's
member cannot read the other's namespace on either cluster.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.conf import settings

from catalog.facts import product_label
from core.errors import ClusterError
from localcluster import worker as local_worker
from metering import fleet_ingest
from metering.models import AllocationInterval
from metering.selectors import workload_costs
from scheduler.cluster import doors, fleet
from scheduler.cluster.dispatch import fleet_plan
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import Cluster
from scheduler.cluster.reconcile import workers
from scheduler.cluster.reconcile.converge import managed_selector
from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.cluster.render.labels import LOCAL_QUEUE
from scheduler.workloads import services as workloads
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.lifecycle import logs as pod_logs
from scheduler.workloads.lifecycle import pods as workload_pods
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.submit.spec import workload_spec
from tenants.services.grants import grant_quota
from tenants.services.tenants import add_member
from tests.scheduler.cluster_helpers import as_user, h100_h200_team, restricted_pod, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

WORKER = "local-worker"
SECRET = "gpu-portal-test-worker-kubeconfig"
KUEUE_NAMESPACE = "kueue-system"
GPU = "nvidia.com/gpu"


def _active(obj: dict | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


def _leave_nothing(kube: KubeGateway, remote: KubeGateway) -> None:
    """This instance's MultiKueue objects on the manager and its teams on the worker."""
    selector = managed_selector()
    for kind in workers.MULTIKUEUE_KINDS:
        for obj in kube.list(kind, label_selector=selector):
            kube.delete(kind, obj["metadata"]["name"])
    kube.delete("Secret", SECRET, KUEUE_NAMESPACE)
    for kind in ("Namespace", "ClusterQueue"):
        for obj in remote.list(kind, label_selector=selector):
            remote.delete(kind, obj["metadata"]["name"])


@pytest.fixture
def fleet_world(kube, kube_cluster, kube_worker, world):
    """The platform team's steps: the worker's kubeconfig in a Secret on the manager, the home
    cluster made the manager, the worker registered in group `burst`."""
    text = local_worker.kubeconfig_text()
    platform = KubeGateway.from_kubeconfig(str(kube_cluster.kubeconfig))  # the cluster's admin
    platform.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": KUEUE_NAMESPACE},
            "type": "Opaque",
            "data": {"kubeconfig": base64.b64encode(text.encode()).decode()},
        }
    )
    local = Cluster.objects.create(name="local")
    fleet.update_cluster(actor=world.admin, cluster=local, role="manager")
    fleet.register_cluster(
        actor=world.admin, name=WORKER, group="burst", credentials_secret_name=SECRET
    )
    doors.forget()
    remote = KubeGateway.from_kubeconfig_text(text)
    member_there = KubeGateway.from_kubeconfig_text(text)
    member_there.api.set_default_header("Impersonate-User", world.member.username)
    try:
        yield SimpleNamespace(remote=remote, member_there=member_there)
    finally:
        _leave_nothing(platform, remote)
        doors.forget()


def _team(world, kube, tenant_namespaces, prefix, placement):
    tenant, _, h200 = h100_h200_team(world, kube, tenant_namespaces, prefix, prefix)
    grant_quota(
        actor=world.admin, tenant=tenant, resource_class=h200, amount=2, placement=placement
    )
    # what the reconcile task does: the team on the manager, then on the fleet's workers
    reconcile_tenant(kube, tenant.pk)
    assert workers.reconcile_fleet(kube, tenant_ids={tenant.pk}, trigger="test") == {}
    tenant.refresh_from_db()
    return tenant, h200


def _submit(world, tenant, rc, name):
    return workloads.submit_workload(
        actor=world.admin,
        tenant=tenant,
        spec=workload_spec(
            name=name,
            kind="job",
            image="registry.k8s.io/pause:3.10",
            resources={rc.slug: 1},
            priority="gpu-low",
        ),
    )


def _running(kube, workload, timeout=90):
    def check():
        current = workload_sync.sync_workload(kube, workload.pk)
        return current if current.state == "running" else None

    return wait_for(f"workload {workload.name} running", check, timeout=timeout)


def test_a_team_placed_on_a_group_runs_there_with_its_row_pods_logs_and_cancel(
    kube, kube_cluster, tenant_namespaces, world, fleet_world
):
    remote = fleet_world.remote
    tenant, h200 = _team(world, kube, tenant_namespaces, "fleet", "group:burst")
    ns = tenant.namespace
    check = fleet_plan().check_of("group:burst")

    # the manager: MultiKueue's objects, and the team's queue carrying the check
    queue = kube.get("ClusterQueue", ns)
    assert queue["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": check}]}
    config = kube.get("MultiKueueConfig", check)
    assert config["spec"]["clusters"] == [f"gpu-portal-{settings.PORTAL_INSTANCE}-{WORKER}"]
    wait_for(
        "the team's queue active on the manager",
        lambda: _active(kube.get("ClusterQueue", ns)),
        timeout=90,
    )

    # the worker: the team's namespace, access and queues, its ClusterQueue with no check
    there = remote.get("ClusterQueue", ns)
    assert there is not None and "admissionChecksStrategy" not in there["spec"]
    assert remote.get("LocalQueue", LOCAL_QUEUE, ns) is not None
    assert remote.list("RoleBinding", ns, label_selector=managed_selector())

    # submitted through the portal: admitted on the manager, run on the worker
    w = _submit(world, tenant, h200, "far")
    workload_sync.create_in_cluster(kube, w.pk)
    w = _running(kube, w)
    assert w.cluster == WORKER
    selector = f"{WORKLOAD_LABEL}={w.pk}"
    pods_there = remote.list("Pod", ns, label_selector=selector)
    assert [p["spec"]["nodeName"] for p in pods_there] == ["gpu-h200-0"]
    assert kube.list("Pod", ns, label_selector=selector) == []  # nothing runs on the manager
    rows = workload_pods.workload_pod_rows(kube, actor=world.admin, workload=w)
    assert [r.name for r in rows] == [p["metadata"]["name"] for p in pods_there]
    # its logs are asked of the worker, whose KWOK node has none: said so, not a 500
    with pytest.raises(pod_logs.LogsUnavailable, match="simulated node"):
        pod_logs.workload_logs(kube, actor=world.admin, workload=w)

    # metering reads the worker too: its pod's time is the team's, priced with the worker's
    # price factor (statements and the workload's cost alike)
    first = fleet_ingest.ingest_fleet(kube)[0].at
    fleet_ingest.ingest_fleet(kube, now=first + timedelta(minutes=10))  # ten minutes on
    interval = AllocationInterval.objects.get(workload_id=w.pk)
    assert (interval.cluster.name, interval.tenant_id) == (WORKER, tenant.pk)
    worker_row = Cluster.objects.get(name=WORKER)
    at_list_price = workload_costs([w.pk])[w.pk]
    assert at_list_price > 0
    fleet.update_cluster(actor=world.admin, cluster=worker_row, price_factor=Decimal(2))
    assert abs(workload_costs([w.pk])[w.pk] - 2 * at_list_price) <= Decimal("0.01")

    # cancel reaches it there
    w = workloads.cancel_workload(actor=world.admin, workload=w)
    assert workload_sync.delete_from_cluster(kube, w.pk) is True
    wait_for(
        "the job gone from the worker",
        lambda: remote.get("Job", w.k8s_name, ns) is None,
        timeout=60,
    )


def test_a_members_kubectl_job_goes_the_same_way(
    kube, kube_cluster, tenant_namespaces, world, fleet_world
):
    remote = fleet_world.remote
    tenant, _ = _team(world, kube, tenant_namespaces, "fleetk", "group:burst")
    add_member(actor=world.admin, tenant=tenant, username=world.member.username, role="member")
    reconcile_tenant(kube, tenant.pk)
    workers.reconcile_fleet(kube, tenant_ids={tenant.pk}, trigger="test")
    ns = tenant.namespace
    wait_for("the team's queue active", lambda: _active(kube.get("ClusterQueue", ns)), timeout=90)
    pod = restricted_pod("main", {GPU: 1})["spec"]
    pod["nodeSelector"] = {"nvidia.com/gpu.product": product_label("H200-141GB")}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "by-kubectl", "namespace": ns},
        "spec": {"backoffLimit": 0, "template": {"spec": pod}},
    }
    as_user(kube_cluster, world.member.username).create(job)
    wait_for(
        "the member's Job running on the worker",
        lambda: any(
            (p.get("status") or {}).get("phase") == "Running" for p in remote.list("Pod", ns)
        ),
        timeout=90,
    )
    assert kube.list("Pod", ns) == []
    # on the worker the member only looks: work reaches it through the manager's queue alone
    assert fleet_world.member_there.list("Pod", ns)
    job["metadata"]["name"] = "around-the-manager"
    with pytest.raises(ClusterError, match="forbidden|Forbidden"):
        fleet_world.member_there.create(job)


def test_a_team_at_home_runs_on_the_manager_and_teams_stay_apart_on_both(
    kube, kube_cluster, tenant_namespaces, world, fleet_world
):
    remote = fleet_world.remote
    far, _ = _team(world, kube, tenant_namespaces, "fleeta", "group:burst")
    home, h200 = _team(world, kube, tenant_namespaces, "fleeth", "")
    add_member(actor=world.admin, tenant=home, username=world.member.username, role="member")
    reconcile_tenant(kube, home.pk)
    assert "admissionChecksStrategy" not in kube.get("ClusterQueue", home.namespace)["spec"]
    assert remote.get("Namespace", home.namespace) is None  # nothing of it on the worker

    w = _submit(world, home, h200, "near")
    workload_sync.create_in_cluster(kube, w.pk)
    w = _running(kube, w)
    assert w.cluster == ""
    assert kube.list("Pod", home.namespace, label_selector=f"{WORKLOAD_LABEL}={w.pk}")

    # the home team's member reads neither the far team's namespace on the manager nor on
    # the worker, whose RoleBindings name the far team's members only
    for gateway in (as_user(kube_cluster, world.member.username), fleet_world.member_there):
        with pytest.raises(ClusterError, match="forbidden|Forbidden"):
            gateway.list("Pod", far.namespace)
    subjects = {
        s["name"]
        for b in remote.list("RoleBinding", far.namespace, label_selector=managed_selector())
        for s in b.get("subjects") or []
    }
    assert world.member.username not in {name.split(":")[-1] for name in subjects}


def test_a_worker_lost_mid_run_is_said_and_its_work_queued_again_by_kueues_rule(
    kube, tenant_namespaces, world, fleet_world
):
    """The local manager's Kueue keeps work on a lost worker 30 s (`workerLostTimeout`,
    localcluster/kueue.py; Kueue's default is 15 minutes), then evicts and queues it again."""
    tenant, h200 = _team(world, kube, tenant_namespaces, "fleetl", "group:burst")
    ns = tenant.namespace
    wait_for("the team's queue active", lambda: _active(kube.get("ClusterQueue", ns)), timeout=90)
    w = _submit(world, tenant, h200, "lost")
    workload_sync.create_in_cluster(kube, w.pk)
    w = _running(kube, w)
    assert w.cluster == WORKER

    local_worker.down()
    try:
        w = workload_sync.sync_workload(kube, w.pk)
        assert f"worker {WORKER} does not answer" in w.message
        health = fleet.check_cluster(Cluster.objects.get(name=WORKER))
        assert health.reachable is False
        assert WORKER in fleet.fleet_problems()  # on the clusters page and in /readyz

        def queued_again():
            current = workload_sync.sync_workload(kube, w.pk)
            return current if current.state == "queued" else None

        w = wait_for("the work evicted and queued again", queued_again, timeout=120)
        assert w.reason == "Evicted" and "Admitting remote lost" in w.message, w.message
    finally:
        local_worker.up()
    doors.forget()  # a fresh connection to the worker that came back
    w = _running(kube, w, timeout=180)
    assert w.cluster == WORKER
