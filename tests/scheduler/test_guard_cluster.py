"""Security, third pass, on the local cluster as a member with the kubectl access the portal
binds (impersonated): no way to another team's workspace through a Service, no GPU without
quota through a CPU pod on a GPU node or the NVIDIA toolkit's variables, no CI robot token, and
the portal's own Services out of reach; a GPU job made with kubectl still runs."""

# ruff: noqa: F811 (fixtures imported from the modules that define them)
import pytest
from kubernetes import client

from core.errors import ClusterError
from scheduler.cluster.render.labels import MANAGED_BY, MANAGED_BY_LABEL, WORKSPACE_LABEL
from tests.scheduler.cluster_helpers import (
    as_user,
    gpu_tolerations,
    restricted_pod,
    unique_slug,
    wait_for,
    wait_until_refused,
)
from tests.scheduler.test_kueue_cluster import MIG, h100_mig, member_job, team  # noqa: F401
from tests.scheduler.test_namespace_guardrails import team as guarded_team  # noqa: F401

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


def _in(ns: str, manifest: dict) -> dict:
    manifest["metadata"]["namespace"] = ns
    return manifest


def _service(name: str, ns: str, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ports": [{"port": 8888}], **spec},
    }


def test_a_services_way_out_of_the_namespace_is_closed(kube_cluster, guarded_team):
    """(1) An ExternalName or selector-less Service could carry a workspace's signed-in path to
    another team's server; a Service that selects the team's pods is still fine."""
    _, ns, people = guarded_team
    member = as_user(kube_cluster, people["member"])
    elsewhere = _service("ws-other", ns, type="ExternalName")
    elsewhere["spec"]["externalName"] = "ws-victim.team-b.svc.cluster.local"
    wait_until_refused(member, elsewhere, "must select the team's pods", "the Service rule")
    with pytest.raises(ClusterError, match="must select the team's pods"):
        member.create(_service("by-hand", ns), dry_run=True)  # endpoints made by hand
    member.create(_service("mine", ns, selector={"app": "mine"}), dry_run=True)


def test_the_portals_own_services_are_out_of_a_members_reach(kube, kube_cluster, guarded_team):
    """(1) A workspace's Service, made by the portal: a member can neither repoint nor delete
    it; their own Services stay theirs."""
    _, ns, people = guarded_team
    member = as_user(kube_cluster, people["member"])
    owned = _service("ws-notebook", ns, selector={"gpu-portal.io/workspace": "1"})
    owned["metadata"]["labels"] = {MANAGED_BY_LABEL: MANAGED_BY}
    kube.create(owned)
    repoint = {"spec": {"selector": {"app": "elsewhere"}}}

    def refused() -> bool:
        try:
            member.merge_patch("Service", "ws-notebook", repoint, ns)
        except ClusterError as exc:
            return "the portal made this object" in str(exc)
        return False

    wait_for("the ownership guard in force", refused, timeout=30)
    with pytest.raises(ClusterError, match="the portal made this object"):
        member.delete("Service", "ws-notebook", ns)
    assert kube.get("Service", "ws-notebook", ns)["spec"]["selector"] == {
        "gpu-portal.io/workspace": "1"
    }
    member.create(_service("mine", ns, selector={"app": "mine"}))
    member.merge_patch("Service", "mine", {"spec": {"selector": {"app": "other"}}}, ns)
    member.delete("Service", "mine", ns)


@pytest.fixture
def runtime_class(kube_cluster):
    """A RuntimeClass the cluster has (the API server refuses a pod naming one it has not,
    before the guard is asked); the portal's door has no business with RuntimeClasses."""
    node_api = client.NodeV1Api(kube_cluster.api_client)
    name = unique_slug("nvidia")
    node_api.create_runtime_class({"metadata": {"name": name}, "handler": "nvidia"})
    yield name
    node_api.delete_runtime_class(name)


def test_another_members_workspace_run_is_not_a_members_to_stop(kube, kube_cluster, guarded_team):
    """The portal lets only a workspace's owner stop it; with kubectl a member could delete or
    suspend its Job. Their own Jobs stay theirs to delete."""
    _, ns, people = guarded_team
    member = as_user(kube_cluster, people["member"])
    run = _in(ns, member_job("ws-theirs", {}))
    run["metadata"]["labels"] = {MANAGED_BY_LABEL: MANAGED_BY, WORKSPACE_LABEL: "1"}
    run["spec"]["suspend"] = True
    kube.create(run)

    def refused() -> bool:
        try:
            member.delete("Job", "ws-theirs", ns)
        except ClusterError as exc:
            return "a workspace's run" in str(exc)
        return False

    wait_for("the workspace run rule in force", refused, timeout=30)
    with pytest.raises(ClusterError, match="a workspace's run"):
        member.merge_patch("Job", "ws-theirs", {"spec": {"parallelism": 2}}, ns)
    assert kube.get("Job", "ws-theirs", ns) is not None
    mine = _in(ns, member_job("mine", {}))
    mine["spec"]["suspend"] = True
    member.create(mine)
    member.delete("Job", "mine", ns)


def test_only_gpu_pods_reach_gpu_nodes_and_none_names_the_toolkits_variables(
    kube_cluster, guarded_team, runtime_class
):
    """(2) A CPU pod tolerating the GPU taint (or selecting GPU nodes) would land on a GPU node
    and, where the toolkit honours NVIDIA_VISIBLE_DEVICES, see every GPU there."""
    _, ns, people = guarded_team
    member = as_user(kube_cluster, people["member"])
    sneaky = _in(ns, restricted_pod("cpu-on-gpu", {}))
    sneaky["spec"]["tolerations"] = gpu_tolerations()
    wait_until_refused(member, sneaky, "only pods that ask for a GPU", "the GPU node rule")
    picky = _in(ns, restricted_pod("cpu-picks-gpu", {}))
    picky["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    with pytest.raises(ClusterError, match="only pods that ask for a GPU"):
        member.create(picky, dry_run=True)
    job = _in(ns, member_job("cpu-job-on-gpu", {}))
    job["spec"]["template"]["spec"]["tolerations"] = gpu_tolerations()
    with pytest.raises(ClusterError, match="only pods that ask for a GPU"):
        member.create(job, dry_run=True)

    for name, value in (("NVIDIA_VISIBLE_DEVICES", "all"), ("NVIDIA_DRIVER_CAPABILITIES", "all")):
        env = _in(ns, restricted_pod("env-" + name.lower().replace("_", "-"), {}))
        env["spec"]["containers"][0]["env"] = [{"name": name, "value": value}]
        with pytest.raises(ClusterError, match="may not set NVIDIA_"):
            member.create(env, dry_run=True)
    runtime = _in(ns, restricted_pod("runtime", {}))
    runtime["spec"]["runtimeClassName"] = runtime_class
    with pytest.raises(ClusterError, match="no runtimeClassName"):
        member.create(runtime, dry_run=True)
    member.create(_in(ns, restricted_pod("cpu-only", {})), dry_run=True)


def test_the_ci_robots_account_is_not_a_members_to_mount(kube_cluster, guarded_team):
    """(3) The robot's token would outlive the member's place in the team."""
    _, ns, people = guarded_team
    member = as_user(kube_cluster, people["member"])
    robot = _in(ns, restricted_pod("as-robot", {}))
    robot["spec"]["serviceAccountName"] = "ci-robot"
    robot["spec"]["automountServiceAccountToken"] = True
    wait_until_refused(member, robot, "ServiceAccount ci-robot", "the ServiceAccount rule")
    job = _in(ns, member_job("robot-job", {}))
    job["spec"]["template"]["spec"]["serviceAccountName"] = "ci-robot"
    with pytest.raises(ClusterError, match="ServiceAccount ci-robot"):
        member.create(job, dry_run=True)


def test_a_gpu_job_made_with_kubectl_still_runs(
    kube, kube_cluster, tenant_namespaces, world, h100_mig, settings
):
    """Legitimate work passes every new rule: a member's Job asking for a MIG slice, with the
    GPU taint's toleration and a GPU product selector, is admitted by Kueue and runs."""
    settings.PORTAL_INSTANCE = unique_slug("guard")  # a cohort of its own
    tenant = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="gg")
    member = as_user(kube_cluster, world.member.username)
    job = member_job(
        "train", {MIG: 1}, node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    )
    job["metadata"]["namespace"] = tenant.namespace
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "default"}
    member.create(job)

    def running() -> bool:
        pods = kube.list("Pod", tenant.namespace, label_selector="job-name=train")
        return any((p.get("status") or {}).get("phase") == "Running" for p in pods)

    wait_for("the member's GPU job running", running, timeout=60)
