"""The Helm chart's ServiceAccount on the local cluster: what it may not do, tried for real.

(That it may do everything the portal needs is proven by the whole cluster suite, which acts as
this account: see `localcluster.portal_account` and the `kube` fixture.)
"""

import pytest

from core.errors import PermanentClusterError
from localcluster import portal_account
from scheduler.cluster.kube import KubeGateway
from tests.scheduler.cluster_helpers import unique_slug

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


@pytest.fixture
def tenant_ns(kube_admin):
    name = f"tenant-{unique_slug('rbac')}"
    kube_admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
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
