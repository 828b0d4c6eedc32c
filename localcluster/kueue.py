"""Kueue as a plain local process: its CRDs, webhook cert, config and webhook configurations.

The API server reaches Kueue's webhooks by URL (https://127.0.0.1:<port>/...) with the local CA
as caBundle, as Kueue's envtest framework does; nothing runs in the cluster. Everything here is
idempotent (server-side apply) and runs before the kueue process starts (cluster.up).

The manifests come from the Kueue module itself (copied next to the binary at build time):
config/components/crd/bases (CRDs), config/components/crd/kustomization.yaml and its patches
(which CRDs get the /convert webhook) and config/components/webhook/manifests.yaml (paths and
rules of every webhook). Only their clientConfig and, for the workload kinds, the
namespaceSelector are rewritten.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

import yaml
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException

from catalog import dra_devices, kueue_config, kueue_integrations, slices

from . import build
from .base import (
    KUBECONFIG,
    PKI,
    STATE_DIR,
    ClusterError,
    api_client,
    ensure_serving_cert,
    http_ok,
    is_worker,
    kueue_ports,
    server_side_apply,
)

# Set by the portal on every tenant namespace. Kueue manages Jobs, Pods, Deployments and
# StatefulSets only there (managedJobsNamespaceSelector, from the portal's fragment), and the
# webhooks for those kinds select the same namespaces, so a Kueue outage can never block pods
# in kube-system or test namespaces.
QUEUE_ENFORCED_LABEL = kueue_config.QUEUE_ENFORCED_LABEL
TENANT_SELECTOR = kueue_config.TENANT_SELECTOR

# The (API group, resource) of the integrations the local cluster can run (Kubernetes' own
# kinds and JobSet: no Kubeflow or KubeRay controller runs here): their webhook entries get
# TENANT_SELECTOR. "deployment" and "statefulset" implicitly enable "pod" only for their own
# pods (v0.19: ImplicitlyEnabledFrameworkNames); the default lists it, so bare pods are
# queued too.
WORKLOAD_RESOURCES = {
    ("batch", "jobs"),
    ("", "pods"),
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("jobset.x-k8s.io", "jobsets"),  # its controller runs here too (jobset.py)
}
KUEUE_GROUP = "kueue.x-k8s.io"

# Off, though beta and on by default in v0.19: TopologyAwareScheduling (with it the pod webhook
# adds a second gate, kueue.x-k8s.io/topology, to every managed pod) and its TASProfileMixed
# (Kueue's gate validation rejects a TAS profile without TAS), and
# VisibilityOnDemand (its API server reads a cert from a hard-coded /visibility, exits without
# it, and needs an APIService routed to it). Given by flag only: flag and config's featureGates
# together is a start-up error. None of them is among v0.18/v0.19's removed gates.
# Since v0.19 Kueue refuses to start with a TAS gate on (by default) while TopologyAwareScheduling
# is off ("TASMultiLayerTopology requires TopologyAwareScheduling to be enabled", ...): those it
# named are off too.
# On: the gates the portal's fragment names (kueue_config.FEATURE_GATES), among them
# UnadmittedWorkloadsObservability (beta, off by default), whose reasons "why it waits" reads.
TAS_DEPENDENT_GATES = (
    "TASHandleOverlappingFlavors",
    "TASFailedNodeReplacement",
    "TASFailedNodeReplacementFailFast",
    "TASReplaceNodeOnPodTermination",
    "TASReplaceNodeOnNodeTaints",
    "TASMultiLayerTopology",
    "TASRecomputeAssignmentWithinSchedulingCycle",
)


# MultiKueue (beta, on by default since v0.9): on the full local cluster, the fleet's manager,
# with the incremental dispatcher's gates and Configuration section the portal prints for a
# manager (`manage.py kueue_config --manager`); off on a worker (base.role), which only runs
# what the manager dispatches (a manager cannot be its own worker).
def feature_gates(worker: bool | None = None) -> str:
    worker = is_worker() if worker is None else worker
    multikueue = {"MultiKueue": False} if worker else kueue_config.MULTIKUEUE_GATES
    return ",".join(
        [
            "TopologyAwareScheduling=false,TASProfileMixed=false",
            *(f"{gate}=false" for gate in TAS_DEPENDENT_GATES),
            "VisibilityOnDemand=false",
            *(
                f"{gate}={str(on).lower()}"
                for gate, on in {**kueue_config.FEATURE_GATES, **multikueue}.items()
            ),
        ]
    )


# Read once, as the paths are: a worker is another process started with LOCALCLUSTER_ROLE set.
FEATURE_GATES = feature_gates()
VISIBILITY_VERSIONS = ("v1beta1", "v1beta2")  # config/components/visibility/apiservice_*.yaml
FIELD_MANAGER = "gpu-portal-localcluster"
WORKER_LOST_S = 30
DIGEST_ANNOTATION = "gpu-portal.local/source-sha256"  # on each CRD: what was applied
MUTATING = "kueue-mutating-webhook-configuration"
VALIDATING = "kueue-validating-webhook-configuration"

# Where a real install keeps Kueue's Configuration (the portal's KUEUE_CONFIG_* defaults).
CONFIG_NAMESPACE = "kueue-system"
CONFIG_MAP = "kueue-manager-config"
CONFIG_MAP_KEY = "controller_manager_config.yaml"
CERT_DIR = PKI / "kueue"  # tls.crt/tls.key: webhook server and metrics server
STATE = STATE_DIR / "kueue"
CONFIG = STATE / "config.yaml"


def component() -> build.Component:
    return next(c for c in build.components() if c.module == "sigs.k8s.io/kueue")


def assets_dir(comp: build.Component | None = None) -> Path:
    return build.bin_dir(comp or component())


def argv(binary: Path, feature_gates: str = FEATURE_GATES) -> list[str]:
    return [
        str(binary),
        f"--config={CONFIG}",
        f"--kubeconfig={KUBECONFIG}",
        f"--feature-gates={feature_gates}",
        "--zap-encoder=console",
    ]


def env() -> dict[str, str]:
    # Read by our edit of Kueue's main.go (build.KUEUE_METRICS_CERT_EDIT).
    return {"KUEUE_METRICS_CERT_DIR": str(CERT_DIR)}


def frameworks(environ: Mapping[str, str] | None = None) -> list[str]:
    """KUEUE_INTEGRATIONS as the portal's settings read it (the same default); only those the
    local cluster can run: another's webhooks would be dropped and its kind left unqueued."""
    names = kueue_integrations.from_env(os.environ if environ is None else environ)
    local = {
        name
        for name, f in kueue_integrations.FRAMEWORKS.items()
        if (f.group, f.resource) in WORKLOAD_RESOURCES
    }
    if unknown := [name for name in names if name not in local]:
        raise ClusterError(
            f"{kueue_integrations.ENV} names {unknown}: the local cluster runs only {sorted(local)}"
        )
    return list(names)


def config() -> dict:
    webhook, health, metrics = kueue_ports()
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        # The default too; stated because it is also excluded from the managed namespaces.
        "namespace": "kueue-system",
        # One replica, no in-cluster namespace to hold a Lease.
        "leaderElection": {"leaderElect": False},
        # Its cert rotator would issue a cert for <service>.<namespace>.svc, not 127.0.0.1.
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook, "certDir": str(CERT_DIR)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        # HTTPS with TokenReview/SubjectAccessReview: scrape with the admin token.
        "metrics": {"bindAddress": f"127.0.0.1:{metrics}", "enableClusterQueueResources": True},
        # queue enforcement, slices, fair sharing, the client rate, all-or-nothing gangs: what
        # the portal needs of any Kueue, from the same environment the portal's settings read
        # (GPU_QUOTA_UNIT: "class" runs Kueue without transformations; KUEUE_INTEGRATIONS;
        # KUEUE_PODS_READY_*)
        **kueue_config.kueue_configuration(
            os.environ.get("GPU_QUOTA_UNIT", slices.UNIT_SLICES),
            feature_gates=False,
            pods_ready=kueue_config.PodsReady.from_env(os.environ),
            integrations=frameworks(),
            # the DRA node's model (localcluster/dra_node.py), as dev and test settings say
            dra_models=dra_devices.from_env(os.environ, dra_devices.LOCAL_CLUSTER_MODELS),
            # the manager's incremental dispatcher (Kueue's default step); none on a worker
            multikueue=None if is_worker() else kueue_config.DEFAULT_DISPATCH_STEP,
            # work on a worker that stops answering is queued again after 30 s, not Kueue's
            # 15 minutes: the fleet tests lose a worker mid-run (test_fleet_cluster.py)
            worker_lost_s=None if is_worker() else WORKER_LOST_S,
        ),
    }


def ensure_cert() -> None:
    """A serving cert for 127.0.0.1 (IP SAN) signed by the cluster CA (once per CA)."""
    ensure_serving_cert(CERT_DIR, "kueue-localcluster")


def write_config(*, dra: bool = True) -> str:
    """config.yaml for the process; returns its text. `dra=False`: without the DRA mapping and
    the MultiKueue dispatcher, as a Kueue before v0.19 reads it (the upgrade tests' previous
    release: its strict decoding refuses `resources.deviceClassMappings` and
    `multiKueue.incrementalDispatcherConfig`; it ran with MultiKueue off)."""
    STATE.mkdir(parents=True, exist_ok=True)
    body = config()
    if not dra:
        body.get("resources", {}).pop("deviceClassMappings", None)
        body.pop("multiKueue", None)
    text = yaml.safe_dump(body, sort_keys=False)
    tmp = CONFIG.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(CONFIG)
    return text


def config_map(text: str) -> dict:
    """The Configuration where Kueue's Helm chart and release manifests keep it, so that the
    portal reads the local Kueue's as it reads a real install's (scheduler/cluster/
    kueue_settings.py)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIG_MAP,
            "namespace": CONFIG_NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER},
        },
        "data": {CONFIG_MAP_KEY: text},
    }


def publish_config(api: ApiClient, text: str) -> None:
    _apply(
        api,
        f"/api/v1/namespaces/{CONFIG_NAMESPACE}",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CONFIG_NAMESPACE}},
    )
    _apply(api, f"/api/v1/namespaces/{CONFIG_NAMESPACE}/configmaps/{CONFIG_MAP}", config_map(text))


def _ca_bundle() -> str:
    return base64.b64encode((PKI / "ca.crt").read_bytes()).decode()


def _client_config(path: str) -> dict:
    return {"url": f"https://127.0.0.1:{kueue_ports()[0]}{path}", "caBundle": _ca_bundle()}


def _load(path: Path) -> list[dict]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the Workload CRD is 1.4 MB
    return [d for d in yaml.load_all(path.read_text(), Loader=loader) if d]


def _conversions(comp: build.Component | None = None) -> dict[str, dict]:
    """CRD name -> spec.conversion, for the CRDs the module's kustomization patches."""
    base = assets_dir(comp) / "crds"
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    out: dict[str, dict] = {}
    for patch in kustomization.get("patches") or []:
        if "/webhook_in_" not in patch.get("path", ""):
            continue
        (doc,) = _load(base / patch["path"])
        conv = copy.deepcopy(doc["spec"]["conversion"])
        conv["webhook"]["clientConfig"] = _client_config(
            conv["webhook"]["clientConfig"]["service"]["path"]
        )
        out[doc["metadata"]["name"]] = conv
    return out


def crd_files(comp: build.Component | None = None) -> dict[str, Path]:
    """CRD name -> its file; controller-gen names them <group>_<plural>.yaml."""
    files = {}
    for path in sorted((assets_dir(comp) / "crds").glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        group, plural = path.stem.split("_", 1)
        files[f"{plural}.{group}"] = path
    return files


def crds(
    skip_digests: set[str] | frozenset[str] = frozenset(), comp: build.Component | None = None
) -> list[dict]:
    """Kueue's CRDs, with the /convert webhook on those its kustomization patches, each
    annotated with the digest of its source (file, conversion stanza): those whose digest is in
    skip_digests (already applied) are left out unparsed."""
    files, conversions = crd_files(comp), _conversions(comp)
    if unknown := set(conversions) - set(files):
        raise ClusterError(f"Kueue conversion patches for unknown CRDs: {unknown}")
    docs = []
    for name, path in files.items():
        conv = conversions.get(name)
        source = path.read_bytes() + json.dumps(conv, sort_keys=True).encode()
        digest = hashlib.sha256(source).hexdigest()
        if digest in skip_digests:
            continue
        (doc,) = [d for d in _load(path) if d.get("kind") == "CustomResourceDefinition"]
        if doc["metadata"]["name"] != name:
            raise ClusterError(f"{path} holds {doc['metadata']['name']}, not {name}")
        if conv:
            doc["spec"]["conversion"] = conv
        doc["metadata"].setdefault("annotations", {})[DIGEST_ANNOTATION] = digest
        docs.append(doc)
    return docs


METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def _applied_digests(api: ApiClient) -> set[str]:
    """The digests on Kueue's CRDs in the cluster (metadata only: the CRDs are 2 MB in all)."""
    resp = api.call_api(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "GET",
        header_params={"Accept": METADATA_LIST},
        auth_settings=["BearerToken"],
        response_type="object",
        _return_http_data_only=True,
    )
    return {
        (item["metadata"].get("annotations") or {}).get(DIGEST_ANNOTATION, "")
        for item in resp.get("items") or []  # null when there are no CRDs at all
        if item["metadata"]["name"].endswith(f".{KUEUE_GROUP}")
    } - {""}


def webhook_configurations(comp: build.Component | None = None) -> list[dict]:
    """Kueue's webhook manifest, pointed at the local process. Kept: Kueue's own kinds (rules
    as shipped) and the enabled integrations (scoped to tenant namespaces); dropped: the other
    integrations (Kueue answers them with no-op handlers; the API server need not call it for
    kinds it ignores)."""
    out = []
    for doc in _load(assets_dir(comp) / "webhook" / "manifests.yaml"):
        kept, workload_kinds = [], set()
        for hook in doc["webhooks"]:
            targets = {
                (group, resource.split("/")[0])
                for rule in hook["rules"]
                for group in rule["apiGroups"]
                for resource in rule["resources"]
            }
            if all(group == KUEUE_GROUP for group, _ in targets):
                pass
            elif targets <= WORKLOAD_RESOURCES:
                hook["namespaceSelector"] = copy.deepcopy(TENANT_SELECTOR)
                workload_kinds |= targets
            else:
                continue
            hook["clientConfig"] = _client_config(hook["clientConfig"]["service"]["path"])
            kept.append(hook)
        if workload_kinds != WORKLOAD_RESOURCES:
            raise ClusterError(
                f"Kueue's {doc['kind']} has webhooks for {sorted(workload_kinds)}, "
                f"expected {sorted(WORKLOAD_RESOURCES)}: the manifest changed"
            )
        name = MUTATING if doc["kind"] == "MutatingWebhookConfiguration" else VALIDATING
        doc["metadata"] = {"name": name, "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}}
        doc["webhooks"] = kept
        out.append(doc)
    return out


def _apply(api: ApiClient, path: str, body: dict) -> None:
    server_side_apply(api, path, body, FIELD_MANAGER)


def served_resources(api: ApiClient) -> set[str]:
    """Resource names served under kueue.x-k8s.io/v1beta2 (empty before the CRDs exist)."""
    try:
        resp = api.call_api(
            f"/apis/{KUEUE_GROUP}/v1beta2",
            "GET",
            auth_settings=["BearerToken"],
            response_type="object",
            _return_http_data_only=True,
        )
    except ApiException as exc:
        if exc.status == 404:
            return set()
        raise
    return {r["name"] for r in resp.get("resources", [])}


def prepare(api: ApiClient, timeout: float = 30, comp: build.Component | None = None) -> None:
    """CRDs, cert, config and webhook configurations: all Kueue needs before it starts (`comp`:
    another build of Kueue than the checkout's, e.g. the previous release's)."""
    ensure_cert()
    publish_config(api, write_config())
    # Applying all 11 CRDs takes 1.5 s; only those whose source changed are applied again.
    for doc in crds(skip_digests=_applied_digests(api), comp=comp):
        name = doc["metadata"]["name"]
        _apply(api, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", doc)
    # Kueue's manager fails at start on a kind the API server does not serve yet.
    want = {name.split(".", 1)[0] for name in crd_files(comp)}
    deadline = time.monotonic() + timeout
    while not want <= served_resources(api):
        if time.monotonic() > deadline:
            raise ClusterError(
                f"Kueue's CRDs not served after {timeout:.0f} s: missing "
                f"{sorted(want - served_resources(api))}"
            )
        time.sleep(0.1)
    for doc in webhook_configurations(comp):
        plural = doc["kind"].lower() + "s"
        path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{doc['metadata']['name']}"
        _apply(api, path, doc)
    # With VisibilityOnDemand off nothing serves visibility.kueue.x-k8s.io; a leftover
    # APIService (from a full install) would make discovery fail for every client.
    for version in VISIBILITY_VERSIONS:
        try:
            api.call_api(
                f"/apis/apiregistration.k8s.io/v1/apiservices/{version}.visibility.{KUEUE_GROUP}",
                "DELETE",
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise


def ready() -> bool:
    return http_ok(f"http://127.0.0.1:{kueue_ports()[1]}/readyz")


def storage_ready() -> bool:
    """A LIST of each of Kueue's kinds answers: for a moment after the API server starts, or
    after a CRD changed (an upgrade applies Kueue's new ones), custom resources that discovery
    already lists answer 429 "storage is (re)initializing"."""
    api = api_client()
    try:
        for plural in sorted(name.split(".", 1)[0] for name in crd_files()):
            api.call_api(
                f"/apis/{KUEUE_GROUP}/v1beta2/{plural}",
                "GET",
                query_params=[("limit", "1")],
                auth_settings=["BearerToken"],
                response_type="object",
                _return_http_data_only=True,
            )
    except (ApiException, OSError):
        return False
    finally:
        api.close()
    return True
