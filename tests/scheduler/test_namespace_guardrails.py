"""What a team member holding the kubectl access the portal binds can and cannot do in the team's
namespace, tried on the local cluster as that member (impersonated): run workloads, yes; use a
priority class the portal did not grant, change access, isolation or quota, no."""

from contextlib import contextmanager

import pytest

from core.errors import ClusterError
from scheduler.cluster.reconcile.runs import (
    reconcile_all,
    reconcile_cluster_objects,
    reconcile_tenant,
)
from scheduler.cluster.reconcile.specs import tenant_namespace
from tenants.models import Membership
from tenants.services.tenants import create_tenant
from tests.scheduler.cluster_helpers import (
    as_user,
    restricted_pod,
    unique_slug,
    wait_for,
    wait_until_refused,
)
from tests.tenants.factories import MembershipFactory, UserFactory

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


@pytest.fixture
def team(kube, tenant_namespaces, world):
    """A reconciled tenant (gpu-high and gpu-low allowed) with an owner, a member and a viewer."""
    slug = unique_slug("guard")
    tenant = create_tenant(actor=world.admin, slug=slug, name="Guardrails")
    people = {}
    for role in (Membership.Role.OWNER, Membership.Role.MEMBER, Membership.Role.VIEWER):
        people[role] = MembershipFactory(
            tenant=tenant, role=role, user=UserFactory(username=f"{slug}-{role}")
        ).user.username
    ns = tenant_namespace(tenant)
    tenant_namespaces.append(ns)
    reconcile_cluster_objects(kube)
    run = reconcile_tenant(kube, tenant.pk)
    assert run.error == "", run.error
    return tenant, ns, people


def _in(ns: str, manifest: dict) -> dict:
    manifest["metadata"]["namespace"] = ns
    return manifest


def _job(name: str, priority_class: str | None = None) -> dict:
    pod = restricted_pod(name, {})
    if priority_class:
        pod["spec"]["priorityClassName"] = priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": pod["spec"]}},
    }


def _binding(name: str, user: str, *, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "labels": labels or {}},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "admin",
        },
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}],
    }


@contextmanager
def narrowed_allowlist(kube, member, ns: str, settings, entries: list[str]):
    """The image allow-list narrowed to `entries` in the cluster-wide queue guard for the
    block, then opened again; each change waits until the API server enforces it, so the
    next test never meets the narrowed rule (an applied policy takes a moment to hold)."""
    unlisted = _in(ns, restricted_pod("unlisted-probe", {}))
    unlisted["spec"]["containers"][0]["image"] = "unlisted.example.com/probe:1"
    settings.WORKLOAD_IMAGE_ALLOWLIST = entries
    reconcile_cluster_objects(kube)
    try:
        wait_until_refused(member, unlisted, "allow-list", "the image rule in force")
        yield
    finally:
        settings.WORKLOAD_IMAGE_ALLOWLIST = ["*"]
        reconcile_cluster_objects(kube)

        def admitted() -> bool:
            try:
                member.create(unlisted, dry_run=True)
            except ClusterError:
                return False
            return True

        wait_for("the image rule lifted", admitted, timeout=30)


def test_a_member_cannot_run_pods_at_a_priority_class_the_portal_does_not_hand_out(
    kube, kube_cluster, team
):
    tenant, ns, people = team
    member = as_user(kube_cluster, people["member"])
    node_critical = _in(ns, restricted_pod("node-critical", {}, "system-node-critical"))
    wait_until_refused(
        member, node_critical, "only the portal's priority classes", "the priority rule in force"
    )
    for pc in ("system-node-critical", "system-cluster-critical"):
        with pytest.raises(ClusterError, match="only the portal's priority classes"):
            member.create(_in(ns, restricted_pod("crit", {}, pc)), dry_run=True)
        with pytest.raises(ClusterError, match="only the portal's priority classes"):
            member.create(_in(ns, _job("crit-job", pc)), dry_run=True)
    # the portal's own classes: a granted one is admitted, the critical one (no allowance)
    # is capped at zero pods by the team's quota
    member.create(_in(ns, restricted_pod("low", {}, "gpu-low")), dry_run=True)
    member.create(_in(ns, _job("high-job", "gpu-high")), dry_run=True)
    wait_for(
        "the critical quota's status",
        lambda: (kube.get("ResourceQuota", "gpu-portal-priority-gpu-critical", ns) or {}).get(
            "status"
        ),
    )
    with pytest.raises(ClusterError, match="exceeded quota"):
        member.create(_in(ns, restricted_pod("crit", {}, "gpu-critical")), dry_run=True)


def test_members_and_owners_run_workloads_but_cannot_change_access_isolation_or_quota(
    kube_cluster, team
):
    tenant, ns, people = team
    for role in ("member", "owner"):
        person = as_user(kube_cluster, people[role])
        # what workloads need
        person.create(_in(ns, _job("train")), dry_run=True)
        person.create(
            _in(ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}),
            dry_run=True,
        )
        person.create(
            _in(
                ns,
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "s3"},
                    "stringData": {"key": "value"},
                },
            ),
            dry_run=True,
        )
        person.create(
            _in(
                ns,
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                },
            ),
            dry_run=True,
        )
        assert person.list("Job", ns) == []
        # what changes access, isolation or quota
        with pytest.raises(ClusterError, match="forbidden"):
            person.create(_in(ns, _binding("friend", "someone-outside")), dry_run=True)
        with pytest.raises(ClusterError, match="forbidden"):
            person.merge_patch(
                "RoleBinding",
                f"gpu-portal-team-{role}s",
                {"subjects": [{"kind": "User", "name": "someone-outside"}]},
                ns,
            )
        with pytest.raises(ClusterError, match="forbidden"):
            person.merge_patch(
                "NetworkPolicy", "gpu-portal-isolation", {"spec": {"ingress": [{}]}}, ns
            )
        with pytest.raises(ClusterError, match="forbidden"):
            person.delete("NetworkPolicy", "gpu-portal-isolation", ns)
        with pytest.raises(ClusterError, match="forbidden"):
            person.merge_patch(
                "ResourceQuota",
                "gpu-portal-quota",
                {"spec": {"hard": {"requests.nvidia.com/gpu": "100"}}},
                ns,
            )
        with pytest.raises(ClusterError, match="forbidden"):
            person.merge_patch("Role", "gpu-portal-workloads", {"rules": []}, ns)
    viewer = as_user(kube_cluster, people["viewer"])
    assert viewer.list("Job", ns) == []
    with pytest.raises(ClusterError, match="forbidden"):
        viewer.list("Secret", ns)
    with pytest.raises(ClusterError, match="forbidden"):
        viewer.create(_in(ns, _job("train")), dry_run=True)


def test_a_role_binding_made_outside_the_portal_is_pruned_unless_kept(
    kube, kube_admin, world, team
):
    tenant, ns, people = team
    # a cluster admin's bindings (the portal itself may bind nobody to these roles)
    kube_admin.create(_in(ns, _binding("handmade", "someone-outside")))
    kube_admin.create(_in(ns, _binding("kept", "auditor", labels={"gpu-portal.io/keep": "true"})))

    run = reconcile_tenant(kube, tenant.pk)

    assert kube.get("RoleBinding", "handmade", ns) is None
    assert kube.get("RoleBinding", "kept", ns) is not None
    assert f"RoleBinding/{ns}/handmade: deleted" in run.changes
    assert f"RoleBinding/{ns}/handmade: access granted outside the portal" in run.drift
    # the periodic run, from one cluster-wide listing, does the same
    kube_admin.create(_in(ns, _binding("handmade-again", "someone-outside")))
    summary = reconcile_all(kube)
    assert summary.drifted >= 1
    assert kube.get("RoleBinding", "handmade-again", ns) is None
    assert kube.get("RoleBinding", "kept", ns) is not None
    assert kube.get("RoleBinding", "gpu-portal-team-owners", ns) is not None


def test_a_member_cannot_tolerate_the_gpu_health_taint_with_kubectl(kube_cluster, team):
    """The portal taints a sick node; a member's pod that tolerated that taint (or every taint)
    would be scheduled onto the GPU the portal took out of service."""
    tenant, ns, people = team
    member = as_user(kube_cluster, people["member"])
    sick = _in(ns, restricted_pod("on-sick-gpu", {}))
    sick["spec"]["tolerations"] = [
        {"key": "gpu-portal.io/gpu-unhealthy", "operator": "Exists", "effect": "NoSchedule"}
    ]
    wait_until_refused(member, sick, "GPU health taint", "the toleration rule in force")
    everything = _in(ns, restricted_pod("tolerates-all", {}))
    everything["spec"]["tolerations"] = [{"operator": "Exists"}]
    with pytest.raises(ClusterError, match="GPU health taint"):
        member.create(everything, dry_run=True)
    job = _in(ns, _job("sick-job"))
    job["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "gpu-portal.io/gpu-unhealthy", "operator": "Exists"}
    ]
    with pytest.raises(ClusterError, match="GPU health taint"):
        member.create(job, dry_run=True)
    # a pod that asks for no GPU runs off the GPU nodes; one that tolerates their taint is
    # refused (test_guard_cluster.py: only GPU pods reach GPU nodes)
    member.create(_in(ns, restricted_pod("on-cpus", {})), dry_run=True)


def test_a_member_cannot_run_an_image_the_portal_would_refuse(kube, kube_cluster, team, settings):
    tenant, ns, people = team
    member = as_user(kube_cluster, people["member"])
    with narrowed_allowlist(kube, member, ns, settings, ["registry.k8s.io", "docker.io/pytorch"]):
        miner = _in(ns, restricted_pod("miner", {}))
        miner["spec"]["containers"][0]["image"] = "evil.example.com/miner:1"
        with pytest.raises(ClusterError, match="allow-list"):
            member.create(miner, dry_run=True)
        job = _in(ns, _job("miner-job"))
        job["spec"]["template"]["spec"]["initContainers"] = [
            {**job["spec"]["template"]["spec"]["containers"][0], "name": "init", "image": "x/y"}
        ]
        with pytest.raises(ClusterError, match="allow-list"):
            member.create(job, dry_run=True)  # an init container counts too
        # what the allow-list names runs, short Docker Hub names included
        member.create(_in(ns, restricted_pod("pause", {})), dry_run=True)
        torch = _in(ns, _job("torch"))
        torch["spec"]["template"]["spec"]["containers"][0]["image"] = "pytorch/pytorch:2.4"
        member.create(torch, dry_run=True)


def test_updates_of_pods_already_running_are_not_refused(
    kube, kube_admin, kube_cluster, team, settings
):
    """The guard judges what a request adds, not what a pod already had: a scheduled pod carries
    nodeName, and an image the allow-list has since dropped, in every later update (a controller
    removing its finalizer, a member labelling it); refusing those would leave Job pods stuck."""
    tenant, ns, people = team
    member = as_user(kube_cluster, people["member"])
    # registry.k8s.io (the pod's image) is not on it
    with narrowed_allowlist(kube, member, ns, settings, ["docker.io/pytorch"]):
        # a pod with an image the list no longer allows (an admin's, whom the guard trusts),
        # admitted by Kueue and bound by the scheduler
        running = _in(ns, restricted_pod("ran-before", {}))
        running["spec"]["tolerations"] = [{"operator": "Exists"}]  # every node has GPUs here
        kube_admin.create(running)
        wait_for(
            "the pod bound to a node",
            lambda: (kube.get("Pod", "ran-before", ns) or {}).get("spec", {}).get("nodeName"),
            timeout=60,
        )
        labelled = member.merge_patch(
            "Pod", "ran-before", {"metadata": {"labels": {"seen": "yes"}}}, ns
        )
        assert labelled["metadata"]["labels"]["seen"] == "yes"
        # what an update adds is still judged: a new image off the list is refused
        containers = labelled["spec"]["containers"]
        containers[0]["image"] = "evil.example.com/miner:1"
        with pytest.raises(ClusterError, match="allow-list"):
            member.merge_patch("Pod", "ran-before", {"spec": {"containers": containers}}, ns)


def _object(kind: str, name: str, ns: str, **body) -> dict:
    api = "v1"
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": ns}, **body}


def test_a_member_cannot_open_the_cluster_or_outgrow_the_namespace_with_kubectl(kube_cluster, team):
    """What `edit`-like write on Services, Secrets, PVCs and pods would otherwise allow."""
    tenant, ns, people = team
    member = as_user(kube_cluster, people["member"])
    token = _object(
        "Secret",
        "forever",
        ns,
        type="kubernetes.io/service-account-token",
        metadata={
            "name": "forever",
            "namespace": ns,
            "annotations": {"kubernetes.io/service-account.name": "gpu-portal-robot"},
        },
    )
    wait_until_refused(member, token, "ServiceAccount token Secrets", "the Secret rule in force")
    member.create(_object("Secret", "creds", ns, stringData={"key": "v"}), dry_run=True)

    port = [{"port": 80}]
    mine = {"app": "mine"}
    intercept = _object(
        "Service", "mitm", ns, spec={"ports": port, "selector": mine, "externalIPs": ["8.8.8.8"]}
    )
    with pytest.raises(ClusterError, match="may not set externalIPs"):
        member.create(intercept, dry_run=True)
    for kind in ("LoadBalancer", "NodePort"):
        exposed = _object(
            "Service", "out", ns, spec={"type": kind, "ports": port, "selector": mine}
        )
        with pytest.raises(ClusterError, match="exceeded quota"):
            member.create(exposed, dry_run=True)
    member.create(
        _object("Service", "inside", ns, spec={"ports": port, "selector": mine}), dry_run=True
    )

    huge = _object(
        "PersistentVolumeClaim",
        "huge",
        ns,
        spec={"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Ti"}}},
    )
    with pytest.raises(ClusterError, match="exceeded quota.*requests.storage"):
        member.create(huge, dry_run=True)

    # the portal refuses more ephemeral storage than WORKLOAD_MAX_EPHEMERAL_STORAGE; so does
    # the namespace, to kubectl
    greedy = _in(ns, restricted_pod("greedy", {}))
    greedy["spec"]["containers"][0]["resources"] = {"limits": {"ephemeral-storage": "2Ti"}}
    with pytest.raises(ClusterError, match="maximum ephemeral-storage usage per Container is 1Ti"):
        member.create(greedy, dry_run=True)
