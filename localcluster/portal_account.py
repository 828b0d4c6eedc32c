"""The portal's own ServiceAccount on the local cluster, with the RBAC of the Helm chart.

The cluster tests (and the fault run's portal) talk to the API server as this account, not as
the local admin: the chart's ServiceAccount, ClusterRole and bindings are rendered by `helm
template`, applied by the admin, and a token for the account (TokenRequest) goes into a
kubeconfig of its own. What the portal calls and the chart does not allow fails with a 403.
Test set-up that only an operator would do (pods of a team's own, nodes, what the kubelet
reports) uses the admin.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import yaml

from . import build, cluster, kueue

CHART = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "gpu-portal"
REQUIRED_VALUES = CHART.parent / "check-values" / "required.yaml"
RELEASE = "gpu-portal"
RELEASE_NAMESPACE = "gpu-portal-system"
GPU_OPERATOR_NAMESPACE = "gpu-operator"
SERVICE_ACCOUNT = "gpu-portal"
KUBECONFIG = cluster.LOCAL_DIR / "portal-kubeconfig"
RBAC_TEMPLATES = (
    "templates/serviceaccount.yaml",
    "templates/rbac.yaml",
    "templates/rbac-guard.yaml",
)
TOKEN_SECONDS = 24 * 3600  # a run lasts minutes; a kubeconfig left behind expires in a day

_lock = threading.Lock()
_made: Path | None = None  # this process's kubeconfig, once made


class PortalAccountError(RuntimeError):
    pass


def _run(args: list[str], *, stdin: str | None = None) -> str:
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PortalAccountError(f"{' '.join(args[:3])} …: {done.stderr.strip()[:2000]}")
    return done.stdout


def rendered_rbac() -> list[dict]:
    """The chart's ServiceAccount and RBAC objects, as `helm template` renders them (with the
    values every install must name, which `make chart` checks too)."""
    helm = str(build.ensure_built(verbose=False)["helm"])
    args = [helm, "template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE]
    args += ["-f", str(REQUIRED_VALUES), "--set", f"gpuOperator.namespace={GPU_OPERATOR_NAMESPACE}"]
    # the integrations the local cluster's Kueue runs (JobSet's among them): the account may
    # read their CRDs, as an install that enables them would set kueue.integrations
    integrations = json.dumps(list(kueue.frameworks()))
    args += ["--set-json", f"kueue.integrations={integrations}"]
    # the local cluster is a fleet's manager (localcluster/kueue.py): the account reads the
    # workers' kubeconfig Secrets in Kueue's namespace, as multikueue.enabled grants
    args += ["--set", "multikueue.enabled=true"]
    for template in RBAC_TEMPLATES:
        args += ["--show-only", template]
    return [doc for doc in yaml.safe_load_all(_run(args)) if doc]


def kubectl(*args: str, stdin: str | None = None) -> str:
    """kubectl as the local admin."""
    exe = str(build.ensure_built(verbose=False)["kubectl"])
    return _run([exe, f"--kubeconfig={cluster.KUBECONFIG}", *args], stdin=stdin)


def service_account_user() -> str:
    return f"system:serviceaccount:{RELEASE_NAMESPACE}:{SERVICE_ACCOUNT}"


def install() -> list[dict]:
    """Apply the chart's RBAC as the admin (idempotent: server-side apply) and return it."""
    objects = rendered_rbac()
    accounts = [o for o in objects if o["kind"] == "ServiceAccount"]
    if [o["metadata"]["name"] for o in accounts] != [SERVICE_ACCOUNT]:
        raise PortalAccountError(f"the chart renders {accounts!r}, not one ServiceAccount")
    for obj in objects:  # helm leaves the release namespace to the installer
        if obj["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            obj["metadata"].setdefault("namespace", RELEASE_NAMESPACE)
    # and every namespace a Role names (the GPU operator's, Kueue's) to whoever runs those
    wanted = {RELEASE_NAMESPACE, GPU_OPERATOR_NAMESPACE}
    wanted |= {o["metadata"]["namespace"] for o in objects if "namespace" in o["metadata"]}
    namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        for name in sorted(wanted)
    ]
    manifest = yaml.safe_dump_all([*namespaces, *objects])
    kubectl("apply", "--server-side", "--field-manager=gpu-portal-tests", "-f", "-", stdin=manifest)
    return objects


def kubeconfig() -> Path:
    """A kubeconfig that acts as the portal's ServiceAccount, with a fresh token (once per
    process: the token outlives any test run)."""
    global _made
    with _lock:
        if _made is not None and _made.is_file():
            return _made
        install()
        token = kubectl(
            "create",
            "token",
            SERVICE_ACCOUNT,
            f"--namespace={RELEASE_NAMESPACE}",
            f"--duration={TOKEN_SECONDS}s",
        ).strip()
        admin = yaml.safe_load(cluster.KUBECONFIG.read_text())
        server = admin["clusters"][0]["cluster"]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": server}],
            "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
            "contexts": [
                {"name": "portal", "context": {"cluster": "local", "user": SERVICE_ACCOUNT}}
            ],
            "current-context": "portal",
        }
        tmp = KUBECONFIG.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(config))
        tmp.chmod(0o600)
        tmp.replace(KUBECONFIG)
        _made = KUBECONFIG
        return KUBECONFIG
