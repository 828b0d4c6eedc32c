"""The reconciler against the real local API server: quota admission, RBAC objects, drift,
prune, archive, outages and call counts."""

import threading
from datetime import timedelta

import pytest
import yaml
from django.db import connection
from django.utils import timezone

from core.errors import PermanentClusterError, TransientClusterError
from scheduler.cluster.models import ReconcileRun, TenantSyncState
from scheduler.cluster.reconcile.runs import (
    reconcile_all,
    reconcile_cluster_objects,
    reconcile_tenant,
    tenant_lock,
)
from scheduler.cluster.reconcile.specs import tenant_namespace
from tenants.models import CapacityRequest, Membership
from tenants.services.approvals import approve_capacity_request
from tenants.services.grants import expire_grants, revoke_grant
from tenants.services.requests import submit_capacity_request
from tenants.services.tenants import change_tenant_status, create_tenant, remove_member
from tests.scheduler.cluster_helpers import restricted_pod, unique_slug, wait_for
from tests.tenants.factories import (
    MembershipFactory,
    PoolFactory,
    ResourceClassFactory,
    UserFactory,
)

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


@pytest.fixture
def setup(kube, tenant_namespaces, world):
    """A fresh tenant with an owner and a member, and a whole-GPU class with a pool."""
    slug = unique_slug()
    tenant = create_tenant(actor=world.admin, slug=slug, name="Réseau Team ✓")
    owner = UserFactory(username=f"{slug}-owner")
    MembershipFactory(tenant=tenant, user=owner, role=Membership.Role.OWNER)
    MembershipFactory(
        tenant=tenant, user=UserFactory(username=f"{slug}-dev"), role=Membership.Role.MEMBER
    )
    gpu = ResourceClassFactory(
        slug="rtx4090-24gb",
        gpu_model="RTX4090-24GB",
        kind="whole",
        profile="",
        resource_name="nvidia.com/gpu",
        gpu_fraction=1,
    )
    PoolFactory(resource_class=gpu, capacity=4)
    ns = tenant_namespace(tenant)
    tenant_namespaces.append(ns)
    reconcile_cluster_objects(kube)
    return tenant, gpu, ns, owner


def approve(world, tenant, rc, amount, actor):
    request = submit_capacity_request(
        actor=actor,
        tenant=tenant,
        items={rc.slug: amount},
        ends_at=timezone.now() + timedelta(days=1),
        justification="cluster test",
    )
    return approve_capacity_request(actor=world.admin, request=request)


def quota_hard(kube, ns, name="gpu-portal-quota"):
    return kube.get("ResourceQuota", name, ns)["spec"]["hard"]


def test_approval_becomes_namespace_quota_access_and_isolation(kube, kube_admin, setup, world):
    tenant, gpu, ns, owner = setup
    request = approve(world, tenant, gpu, 2, owner)

    run = reconcile_tenant(kube, tenant.pk)

    assert run.status == ReconcileRun.Status.SUCCEEDED and run.writes > 0
    namespace = kube.get("Namespace", ns)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert namespace["metadata"]["annotations"]["gpu-portal.io/display-name"] == "Réseau Team ✓"
    assert quota_hard(kube, ns)["requests.nvidia.com/gpu"] == "2"
    owners = kube.get("RoleBinding", "gpu-portal-team-owners", ns)
    assert owners["roleRef"]["name"] == "gpu-portal-workloads"
    assert [s["name"] for s in owners["subjects"]] == [owner.username]
    members = kube.get("RoleBinding", "gpu-portal-team-members", ns)
    assert {"kind": "ServiceAccount", "name": "ci-robot", "namespace": ns} in members["subjects"]
    policy = kube.get("NetworkPolicy", "gpu-portal-isolation", ns)
    assert policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0][
        "values"
    ] == sorted([ns, "gpu-portal-system"])
    assert kube.get("LimitRange", "gpu-portal-defaults", ns) is not None
    request.refresh_from_db()
    assert request.state == CapacityRequest.State.PROVISIONED
    assert TenantSyncState.objects.get(tenant=tenant).summary == "in sync"

    # The API server itself now enforces the grant: two GPUs fit, a third is refused.
    wait_for(
        "quota status",
        lambda: kube.get("ResourceQuota", "gpu-portal-quota", ns).get("status", {}).get("hard"),
    )
    kube_admin.create(  # the team's own pods (the portal creates none)
        {**restricted_pod("a", {"nvidia.com/gpu": 2}), "metadata": {"name": "a", "namespace": ns}}
    )
    with pytest.raises(PermanentClusterError, match="exceeded quota.*requests.nvidia.com/gpu"):
        kube_admin.create(
            {
                **restricted_pod("b", {"nvidia.com/gpu": 1}),
                "metadata": {"name": "b", "namespace": ns},
            }
        )


def test_a_second_reconcile_of_an_unchanged_tenant_writes_nothing(kube, setup, world):
    tenant, gpu, ns, owner = setup
    approve(world, tenant, gpu, 1, owner)
    reconcile_tenant(kube, tenant.pk)
    writes = kube.stats.writes

    run = reconcile_tenant(kube, tenant.pk)

    assert kube.stats.writes == writes
    assert (run.writes, run.changes, run.drift) == (0, [], [])
    # one GET of the namespace, one LIST per managed kind: 8 namespaced (with the Roles, the
    # LocalQueue and the ResourceClaimTemplates) and the ClusterQueue; the cluster-wide objects
    # were converged by the first run
    assert run.api_calls == 1 + 8 + 1


def test_revoke_and_expiry_lower_the_quota(kube, setup, world):
    tenant, gpu, ns, owner = setup
    first = approve(world, tenant, gpu, 1, owner)
    approve(world, tenant, gpu, 2, owner)
    reconcile_tenant(kube, tenant.pk)
    assert quota_hard(kube, ns)["requests.nvidia.com/gpu"] == "3"

    revoke_grant(actor=world.admin, grant=first.grants.get(), comment="done")
    reconcile_tenant(kube, tenant.pk)
    assert quota_hard(kube, ns)["requests.nvidia.com/gpu"] == "2"

    expire_grants(now=timezone.now() + timedelta(days=2))
    run = reconcile_tenant(kube, tenant.pk)
    assert quota_hard(kube, ns)["requests.nvidia.com/gpu"] == "0"
    # the backstop quota and the team's Kueue queue both go down
    assert run.changes == [
        f"ClusterQueue/{ns}: updated",
        f"ResourceQuota/{ns}/gpu-portal-quota: updated",
    ]


def test_reconcile_all_repairs_drift_and_records_it(kube, setup, world):
    tenant, gpu, ns, owner = setup
    approve(world, tenant, gpu, 2, owner)
    reconcile_tenant(kube, tenant.pk)

    # A human edits the quota and deletes a RoleBinding with kubectl.
    kube.merge_patch(
        "ResourceQuota",
        "gpu-portal-quota",
        {"spec": {"hard": {"requests.nvidia.com/gpu": "99"}}},
        ns,
    )
    kube.delete("RoleBinding", "gpu-portal-team-owners", ns)

    summary = reconcile_all(kube)

    assert summary.drifted >= 1
    assert quota_hard(kube, ns)["requests.nvidia.com/gpu"] == "2"
    assert kube.get("RoleBinding", "gpu-portal-team-owners", ns) is not None
    run = ReconcileRun.objects.filter(tenant=tenant).first()
    assert sorted(run.drift) == [
        f"ResourceQuota/{ns}/gpu-portal-quota: edited outside the portal",
        f"RoleBinding/{ns}/gpu-portal-team-owners: deleted outside the portal",
    ]
    # and a second pass finds nothing to do
    writes = kube.stats.writes
    reconcile_all(kube)
    assert kube.stats.writes == writes


def test_a_full_run_converges_teams_side_by_side_each_run_with_its_own_cost(
    kube, tenant_namespaces, world, settings
):
    """Several teams at once: each is converged whole, each run records its own team's calls
    alone (not its neighbours' on other threads), and a team another worker holds is left."""
    settings.RECONCILE_APPLY_THREADS = 3
    teams = []
    for _ in range(7):
        slug = unique_slug()
        team = create_tenant(actor=world.admin, slug=slug, name=f"Side by side {slug}")
        owner = UserFactory(username=f"{slug}-owner")
        MembershipFactory(tenant=team, user=owner, role=Membership.Role.OWNER)
        tenant_namespaces.append(tenant_namespace(team))
        teams.append(team)
    *free, busy = teams
    holding, release = threading.Event(), threading.Event()

    def another_worker():  # its run of the last team, on a PostgreSQL session of its own
        try:
            with tenant_lock(busy.pk):
                holding.set()
                release.wait(120)
        finally:
            connection.close()

    holder = threading.Thread(target=another_worker)
    holder.start()
    try:
        assert holding.wait(10)
        writes = kube.stats.writes
        summary = reconcile_all(kube)
    finally:
        release.set()
        holder.join()

    assert summary.skipped_busy == 1 and not summary.failed
    assert kube.get("Namespace", tenant_namespace(busy)) is None
    runs = ReconcileRun.objects.filter(tenant__in=free)
    assert sorted(run.tenant_id for run in runs) == sorted(team.pk for team in free)
    for run in runs:
        ns = tenant_namespace(run.tenant)
        assert kube.get("ResourceQuota", "gpu-portal-quota", ns) is not None
        assert kube.get("LocalQueue", "default", ns) is not None
        assert run.status == "succeeded"
        assert run.api_calls == run.writes == len(run.changes)  # created, each once
    # the same objects for each team: a run that counted a neighbour's calls would differ
    assert len({run.writes for run in runs}) == 1 and runs[0].writes >= 8
    assert kube.stats.writes - writes >= sum(run.writes for run in runs)


def test_membership_change_prunes_a_binding_nobody_is_in(kube, setup, world):
    tenant, gpu, ns, owner = setup
    reconcile_tenant(kube, tenant.pk)
    assert kube.get("RoleBinding", "gpu-portal-team-viewers", ns) is None
    viewer = MembershipFactory(tenant=tenant, role=Membership.Role.VIEWER)
    reconcile_tenant(kube, tenant.pk)
    assert (
        kube.get("RoleBinding", "gpu-portal-team-viewers", ns)["subjects"][0]["name"]
        == viewer.user.username
    )
    remove_member(actor=owner, membership=viewer)
    run = reconcile_tenant(kube, tenant.pk)
    assert kube.get("RoleBinding", "gpu-portal-team-viewers", ns) is None
    assert f"RoleBinding/{ns}/gpu-portal-team-viewers: deleted" in run.changes


def test_archiving_deletes_the_namespace(kube, setup, world):
    tenant, gpu, ns, owner = setup
    reconcile_tenant(kube, tenant.pk)
    change_tenant_status(actor=world.admin, tenant=tenant, action="archive")
    run = reconcile_tenant(kube, tenant.pk)
    assert run.changes == [
        f"Namespace/{ns}: deleted (tenant archived)",
        f"ClusterQueue/{ns}: deleted (tenant archived)",  # cluster-scoped: not in the namespace
    ]
    queue = kube.get("ClusterQueue", ns)
    assert queue is None or queue["metadata"].get("deletionTimestamp")
    wait_for(
        "namespace gone or terminating",
        lambda: (
            (kube.get("Namespace", ns) or {}).get("status", {}).get("phase", "gone")
            in ("Terminating", "gone")
        ),
    )


def test_priority_classes_are_the_seed_ones(kube, setup):
    values = {
        n: kube.get("PriorityClass", n)["value"] for n in ("gpu-critical", "gpu-high", "gpu-low")
    }
    assert values == {"gpu-critical": 1_000_000, "gpu-high": 900_000, "gpu-low": 100_000}
    assert not any(kube.get("PriorityClass", n).get("globalDefault") for n in values)


def test_a_forbidden_priority_class_is_refused_by_the_api_server(kube, kube_admin, setup, world):
    tenant, gpu, ns, owner = setup
    approve(world, tenant, gpu, 1, owner)
    reconcile_tenant(kube, tenant.pk)  # allowed: gpu-high, gpu-low only
    wait_for(
        "quota status",
        lambda: (kube.get("ResourceQuota", "gpu-portal-priority-gpu-critical", ns) or {}).get(
            "status"
        ),
    )
    pod = restricted_pod("crit", {"nvidia.com/gpu": 1}, priority_class="gpu-critical")
    pod["metadata"]["namespace"] = ns
    with pytest.raises(PermanentClusterError, match="exceeded quota"):
        kube_admin.create(pod)


def test_unreachable_api_server_is_transient_and_recorded(kube, setup, world, settings, tmp_path):
    tenant, gpu, ns, owner = setup
    from scheduler.cluster.kube import KubeGateway

    # Point every cluster entry at a closed port, whatever port the local cluster listens on.
    kubeconfig = yaml.safe_load(open(settings.KUBECONFIG).read())
    for entry in kubeconfig["clusters"]:
        entry["cluster"]["server"] = "https://127.0.0.1:1"
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(kubeconfig))
    dead = KubeGateway.from_kubeconfig(str(config))
    with pytest.raises(TransientClusterError, match="cannot reach the API server"):
        reconcile_tenant(dead, tenant.pk)
    state = TenantSyncState.objects.get(tenant=tenant)
    assert state.summary.startswith("failed: ")
    assert ReconcileRun.objects.filter(tenant=tenant).first().status == "failed"
    first = state.failing_since
    assert state.consecutive_failures == 1 and first is not None
    with pytest.raises(TransientClusterError):
        reconcile_tenant(dead, tenant.pk)
    state.refresh_from_db()
    assert (state.consecutive_failures, state.failing_since) == (2, first)  # the same streak
    reconcile_tenant(kube, tenant.pk)
    state.refresh_from_db()
    assert (state.consecutive_failures, state.failing_since) == (0, None)


def test_a_namespace_still_terminating_is_retried_not_failed(kube, setup, world):
    tenant, gpu, ns, owner = setup
    reconcile_tenant(kube, tenant.pk)
    # Someone deleted the namespace; a finalizer keeps it Terminating for as long as we like.
    kube.merge_patch("Namespace", ns, {"metadata": {"finalizers": ["gpu-portal.io/test-hold"]}})
    kube.delete("Namespace", ns)
    wait_for("terminating", lambda: kube.get("Namespace", ns)["status"]["phase"] == "Terminating")
    with pytest.raises(TransientClusterError, match="still being deleted"):
        reconcile_tenant(kube, tenant.pk)
    kube.merge_patch("Namespace", ns, {"metadata": {"finalizers": None}})
    wait_for("namespace gone", lambda: kube.get("Namespace", ns) is None, timeout=120)
    run = reconcile_tenant(kube, tenant.pk)
    assert run.status == "succeeded" and kube.get("ResourceQuota", "gpu-portal-quota", ns)
