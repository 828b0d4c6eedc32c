"""The Helm chart's ServiceAccount on the local cluster: what it may not do, tried for real.

(That it may do everything the portal needs is proven by the whole cluster suite, which acts as
this account: see `localcluster.portal_account` and the `kube` fixture.)
"""

import pytest

from core.errors import PermanentClusterError
from localcluster import portal_account
from scheduler.cluster.kube import KubeGateway
from tests.scheduler.cluster_helpers import unique_slug, wait_until_refused

pytestmark = pytest.mark.cluster

SA = portal_account.service_account_user()


def can_i(verb: str, resource: str, namespace: str | None = None, name: str = "") -> bool:
    """`kubectl auth can-i` as the ServiceAccount; "pods/exec" is a subresource (kubectl reads
    a slash as resource/name)."""
    resource, _, subresource = resource.partition("/")
    args = ["auth", "can-i", verb, f"{resource}/{name}" if name else resource, f"--as={SA}"]
    if subresource:
        args.append(f"--subresource={subresource}")
    args.append(f"--namespace={namespace}" if namespace else "--all-namespaces")
    try:
        return portal_account.kubectl(*args).strip() == "yes"
    except portal_account.PortalAccountError as exc:  # can-i exits 1 on "no"
        if "no" in str(exc) or str(exc).rstrip().endswith(":"):
            return False
        raise


def _namespace(kube_admin, labels: dict[str, str]):
    name = unique_slug("rbac")
    kube_admin.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    )
    return name


@pytest.fixture
def tenant_ns(kube_admin):
    """A namespace labelled as a tenant's (what the reconciler makes)."""
    name = _namespace(kube_admin, {"gpu-portal.io/tenant": "rbac"})
    yield name
    kube_admin.delete("Namespace", name)


@pytest.fixture
def other_ns(kube_admin):
    """A namespace that is not a tenant's (kube-system, a platform team's, ...)."""
    name = _namespace(kube_admin, {})
    yield name
    kube_admin.delete("Namespace", name)


# What an attacker holding the portal's token would try first.
REFUSED = [
    ("get", "secrets", "tenant"),
    ("list", "secrets", "tenant"),
    ("list", "secrets", None),
    ("get", "secrets", "kube-system"),
    ("get", "configmaps", "kube-system"),
    ("get", "configmaps", "tenant"),
    ("create", "pods", "tenant"),
    ("create", "pods/exec", "tenant"),
    ("create", "serviceaccounts/token", "tenant"),
    ("create", "clusterrolebindings", None),
    ("create", "clusterroles", None),
    ("escalate", "clusterroles", None),
    ("bind", "clusterroles", None),
    ("impersonate", "users", None),
    ("impersonate", "serviceaccounts", None),
    ("create", "certificatesigningrequests", None),
    ("delete", "nodes", None),
    ("create", "nodes", None),
    ("patch", "customresourcedefinitions", None),
    ("create", "mutatingwebhookconfigurations", None),
    ("update", "deployments", "kube-system"),
    ("create", "persistentvolumes", None),
    # cluster-wide objects other than its own, by name
    ("patch", "validatingadmissionpolicies", None),
    ("delete", "validatingadmissionpolicybindings", None),
    ("patch", "priorityclasses", None),
]


@pytest.mark.parametrize(("verb", "resource", "where"), REFUSED)
def test_the_service_account_is_refused(portal_kubeconfig, tenant_ns, verb, resource, where):
    namespace = tenant_ns if where == "tenant" else where
    assert not can_i(verb, resource, namespace), f"{SA} may {verb} {resource} in {namespace}"


def test_it_binds_and_escalates_only_the_portal_roles(portal_kubeconfig, tenant_ns):
    for role in ("gpu-portal-workloads", "gpu-portal-view"):
        assert can_i("bind", "roles", tenant_ns, role)
        assert can_i("escalate", "roles", tenant_ns, role)
    for role in ("admin", "edit", "cluster-admin", "someone-elses"):
        assert not can_i("bind", "roles", tenant_ns, role)
        assert not can_i("escalate", "roles", tenant_ns, role)
        assert not can_i("bind", "clusterroles", None, role)
    # what a drain and the log view need (subresources, so the can-i above are not vacuous)
    assert can_i("create", "pods/eviction", tenant_ns)
    assert can_i("get", "pods/log", tenant_ns)
    # and config maps only where the GPU operator reads them
    assert can_i("patch", "configmaps", portal_account.GPU_OPERATOR_NAMESPACE)


def test_it_reads_kueues_configuration_and_no_other_config_map_there(portal_kubeconfig):
    assert can_i("get", "configmaps", "kueue-system", "kueue-manager-config")
    assert not can_i("get", "configmaps", "kueue-system", "something-else")
    assert not can_i("list", "configmaps", "kueue-system")
    assert not can_i("patch", "configmaps", "kueue-system", "kueue-manager-config")
    # the ClusterQueue CRD (support.py) and those of the integrations enabled (the local
    # cluster's: JobSet), no other
    assert can_i("get", "customresourcedefinitions", None, "clusterqueues.kueue.x-k8s.io")
    assert can_i("get", "customresourcedefinitions", None, "jobsets.jobset.x-k8s.io")
    assert not can_i("get", "customresourcedefinitions", None, "rayjobs.ray.io")


def test_it_writes_its_own_cluster_objects_by_name_only(portal_kubeconfig):
    assert can_i("patch", "validatingadmissionpolicies", None, "gpu-portal-queue-guard")
    assert can_i("patch", "validatingadmissionpolicies", None, "gpu-portal-ownership-guard")
    assert can_i("patch", "priorityclasses", None, "gpu-low")
    guard = f"{portal_account.RELEASE}-rbac-guard"
    for verb in ("patch", "delete"):
        assert not can_i(verb, "validatingadmissionpolicies", None, guard)
        assert not can_i(verb, "validatingadmissionpolicybindings", None, guard)
    assert not can_i("patch", "priorityclasses", None, "system-cluster-critical")
    assert not can_i("create", "priorityclasses", None, "gpu-portal-higher-than-critical")


def _role(name: str, namespace: str, rules: list[dict]) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": rules,
    }


SECRETS_READ = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]


def test_escalation_through_roles_and_bindings_is_refused(portal_kubeconfig, tenant_ns):
    portal = KubeGateway.from_kubeconfig(portal_kubeconfig)
    # A Role of another name that grants what the portal does not hold: refused (escalation).
    with pytest.raises(PermanentClusterError, match="forbidden"):
        portal.apply(_role("reader", tenant_ns, SECRETS_READ))
    # The portal's own team Role may grant a team its secrets (escalate on that name only).
    portal.apply(_role("gpu-portal-workloads", tenant_ns, SECRETS_READ))
    # Binding anyone to cluster-admin, or to a Role that is not the portal's: refused.
    for kind, name in (("ClusterRole", "cluster-admin"), ("ClusterRole", "admin")):
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"x-{name}", "namespace": tenant_ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [{"kind": "User", "name": "mallory"}],
        }
        with pytest.raises(PermanentClusterError, match="forbidden"):
            portal.apply(binding)
    # Reading a team's Secret directly: refused.
    with pytest.raises(PermanentClusterError, match="forbidden"):
        portal.list("Secret", tenant_ns)


def test_in_cluster_configuration_acts_as_the_service_account(portal_kubeconfig, tmp_path):
    """What a pod of the chart does: API server from KUBERNETES_SERVICE_HOST/PORT, the
    projected token and the CA from files."""
    import base64

    import yaml

    config = yaml.safe_load(open(portal_kubeconfig).read())
    server = config["clusters"][0]["cluster"]["server"]  # https://127.0.0.1:<port>
    host, port = server.removeprefix("https://").rsplit(":", 1)
    token = tmp_path / "token"
    token.write_text(config["users"][0]["user"]["token"])
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]))
    environ = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}

    gateway = KubeGateway.in_cluster(token_file=str(token), ca_file=str(ca), environ=environ)
    assert gateway.list("Node"), "the ServiceAccount reads the nodes"
    with pytest.raises(PermanentClusterError, match="forbidden"):
        gateway.list("Secret", "kube-system")


def test_without_kubeconfig_or_pod_the_error_says_what_to_set(tmp_path):
    with pytest.raises(PermanentClusterError, match="set KUBECONFIG"):
        KubeGateway.in_cluster(
            token_file=str(tmp_path / "none"), ca_file=str(tmp_path / "none"), environ={}
        )


def _binding(namespace: str, subject: dict) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "gpu-portal-team-members", "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "gpu-portal-workloads",
        },
        "subjects": [subject],
    }


ALICE = {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}


def test_bind_and_escalate_stay_inside_tenant_namespaces(
    portal_kubeconfig, kube_admin, tenant_ns, other_ns
):
    """RBAC lets the account bind and escalate the team Role names in every namespace; the
    chart's RBAC guard keeps it to tenant namespaces and to people, so it cannot grant itself
    the Secrets of kube-system through a Role of that name."""
    portal = KubeGateway.from_kubeconfig(portal_kubeconfig)
    wait_until_refused(
        portal,
        _binding(other_ns, ALICE),
        "tenant namespaces only",
        "the RBAC guard to be enforced",
    )
    with pytest.raises(PermanentClusterError, match="tenant namespaces only"):
        portal.apply(_role("gpu-portal-workloads", other_ns, SECRETS_READ))
    assert kube_admin.get("Role", "gpu-portal-workloads", other_ns) is None

    # In a tenant namespace: people yes; itself (a User named like its token), or a
    # ServiceAccount of another namespace, no.
    portal.apply(_role("gpu-portal-workloads", tenant_ns, SECRETS_READ))
    portal.apply(_binding(tenant_ns, ALICE))
    itself = {"kind": "User", "name": portal_account.service_account_user()}
    foreign_sa = {"kind": "ServiceAccount", "name": "default", "namespace": other_ns}
    for subject in (itself, foreign_sa):
        with pytest.raises(PermanentClusterError, match="no system identity"):
            portal.apply(_binding(tenant_ns, subject))
    own_sa = {"kind": "ServiceAccount", "name": "gpu-portal-robot", "namespace": tenant_ns}
    portal.apply(_binding(tenant_ns, own_sa))

    # Nor can it make a namespace a tenant's by labelling it, or delete one that is not.
    label = {"metadata": {"labels": {"gpu-portal.io/tenant": "mine-now"}}}
    with pytest.raises(PermanentClusterError, match="existing namespace into a tenant"):
        portal.merge_patch("Namespace", other_ns, label)
    with pytest.raises(PermanentClusterError, match="tenant namespaces only"):
        portal.delete("Namespace", other_ns)
    assert kube_admin.get("Namespace", other_ns)["status"]["phase"] == "Active"
