"""The JobSet controller as a plain local process: its CRD, webhook cert, config and webhook
configurations (Kueue's JobSet integration queues JobSets; JobSet itself turns one into Jobs).

Same shape as kueue.py: the API server reaches JobSet's webhooks by URL
(https://127.0.0.1:<port>/...) with the local CA as caBundle; everything here is idempotent
(server-side apply) and runs before the jobset process starts (cluster.up).

The manifests come from the JobSet module (copied next to the binary at build time):
config/components/crd/bases (its one CRD) and config/components/webhook (manifests.yaml plus the
kustomize patches that confine its pod webhooks to JobSet's own pods). Only their clientConfig
is rewritten.

Its webhooks cannot be turned off: main.go registers them unconditionally, its readyz waits for
the webhook server, and they do work the controller relies on (the mutating one defaults a
JobSet's spec: its success and startup policies, the Jobs' Indexed completion mode, the pods'
restartPolicy; the validating one rejects what the controller would fail on). So they run, on
127.0.0.1 with a cert from the local PKI, as Kueue's do.
"""

from __future__ import annotations

import base64
import hashlib
import time
from pathlib import Path

import yaml
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException

from . import build
from .base import (
    KUBECONFIG,
    PKI,
    STATE_DIR,
    ClusterError,
    ensure_serving_cert,
    http_ok,
    jobset_ports,
    server_side_apply,
)

GROUP = "jobset.x-k8s.io"
API_VERSION = "v1alpha2"  # the one version its CRD serves (and stores)
CRD_NAME = f"jobsets.{GROUP}"
FIELD_MANAGER = "gpu-portal-localcluster"  # as kueue.py's
DIGEST_ANNOTATION = "gpu-portal.local/source-sha256"  # on the CRD: what was applied
MUTATING = "jobset-mutating-webhook-configuration"
VALIDATING = "jobset-validating-webhook-configuration"

CERT_DIR = PKI / "jobset"  # tls.crt/tls.key: webhook server and metrics server
STATE = STATE_DIR / "jobset"
CONFIG = STATE / "config.yaml"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


def component() -> build.Component:
    return next(c for c in build.components() if c.module == "sigs.k8s.io/jobset")


def assets_dir(comp: build.Component | None = None) -> Path:
    return build.bin_dir(comp or component())


def argv(binary: Path) -> list[str]:
    # Ports, certs and leader election are in the config file (config()); its flags for the
    # same (--metrics-bind-address, --health-probe-bind-address, --leader-elect) would override
    # it, so none of them is passed. --zap-devel=false: its default (development) logs at debug
    # level with stack traces on warnings.
    return [
        str(binary),
        f"--config={CONFIG}",
        f"--kubeconfig={KUBECONFIG}",
        "--zap-devel=false",
        "--zap-encoder=console",
    ]


def config() -> dict:
    webhook, health, metrics = jobset_ports()
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        # One replica, no in-cluster namespace to hold a Lease.
        "leaderElection": {"leaderElect": False},
        # Its cert rotator would issue a cert for jobset-webhook-service.<namespace>.svc (kept in
        # a Secret) and patch the webhook configurations itself; ours is for 127.0.0.1.
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook, "certDir": str(CERT_DIR)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        # HTTPS with TokenReview/SubjectAccessReview (scrape with the admin token), same cert;
        # without certDir it would look in /tmp/k8s-metrics-server/serving-certs.
        "metrics": {"bindAddress": f"127.0.0.1:{metrics}", "certDir": str(CERT_DIR)},
    }


def ensure_cert() -> None:
    ensure_serving_cert(CERT_DIR, "jobset-localcluster")


def write_config() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    tmp = CONFIG.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config(), sort_keys=False))
    tmp.replace(CONFIG)


def _client_config(path: str) -> dict:
    ca_bundle = base64.b64encode((PKI / "ca.crt").read_bytes()).decode()
    return {"url": f"https://127.0.0.1:{jobset_ports()[0]}{path}", "caBundle": ca_bundle}


def _load(path: Path) -> list[dict]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRD is 0.8 MB
    return [d for d in yaml.load_all(path.read_text(), Loader=loader) if d]


def crd_files(comp: build.Component | None = None) -> dict[str, Path]:
    """CRD name -> its file; controller-gen names them <group>_<plural>.yaml."""
    files = {}
    for path in sorted((assets_dir(comp) / "crds").glob("*.yaml")):
        group, plural = path.stem.split("_", 1)
        files[f"{plural}.{group}"] = path
    if set(files) != {CRD_NAME}:
        raise ClusterError(f"JobSet's CRD files name {sorted(files)}, expected only {CRD_NAME}")
    return files


def crd(comp: build.Component | None = None) -> tuple[str, Path]:
    """The digest of the JobSet CRD's file and the file (parsed only when it must be applied).
    It serves one version, so the module's /convert patch is not applied: conversion stays
    None, which is all one version needs."""
    path = crd_files(comp)[CRD_NAME]
    return hashlib.sha256(path.read_bytes()).hexdigest(), path


def crd_doc(path: Path, digest: str) -> dict:
    (doc,) = [d for d in _load(path) if d.get("kind") == "CustomResourceDefinition"]
    if doc["metadata"]["name"] != CRD_NAME:
        raise ClusterError(f"{path} holds {doc['metadata']['name']}, not {CRD_NAME}")
    versions = [v["name"] for v in doc["spec"]["versions"] if v.get("served")]
    if versions != [API_VERSION]:
        # More than one would need the /convert webhook (kueue.py shows how).
        raise ClusterError(f"{CRD_NAME} serves {versions}, expected only {API_VERSION}")
    doc["metadata"].setdefault("annotations", {})[DIGEST_ANNOTATION] = digest
    return doc


def _json_patch(doc: dict, op: dict) -> None:
    """One RFC 6902 operation of a kustomize patch; `replace` is all JobSet's patches use (a
    new version with another fails here rather than apply half its webhooks' scoping)."""
    if op.get("op") != "replace":
        raise ClusterError(f"JobSet webhook patch op {op.get('op')!r} is not handled")
    *parents, last = op["path"].lstrip("/").split("/")
    target = doc
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if isinstance(target, list):
        target[int(last)] = op["value"]
    elif last in target:
        target[last] = op["value"]
    else:
        raise ClusterError(f"JobSet webhook patch: nothing to replace at {op['path']}")


def webhook_configurations(comp: build.Component | None = None) -> list[dict]:
    """JobSet's webhook manifest with its kustomize patches applied (the pod webhooks see only
    pods labelled jobset.sigs.k8s.io/jobset-name, so a JobSet outage blocks no other pod),
    pointed at the local process. The JobSet webhooks see every namespace: JobSets are
    created only where the portal or a test makes them."""
    base = assets_dir(comp) / "webhook"
    docs = _load(base / "manifests.yaml")
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    for patch in kustomization.get("patches") or []:
        target = patch["target"]
        matches = [
            d
            for d in docs
            if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]
        ]
        if len(matches) != 1:
            raise ClusterError(f"JobSet webhook patch {patch['path']}: no single target")
        for op in yaml.safe_load((base / patch["path"]).read_text()):
            _json_patch(matches[0], op)
    out = []
    for doc in docs:
        for hook in doc["webhooks"]:
            hook["clientConfig"] = _client_config(hook["clientConfig"]["service"]["path"])
        name = MUTATING if doc["kind"] == "MutatingWebhookConfiguration" else VALIDATING
        doc["metadata"] = {"name": name, "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}}
        out.append(doc)
    if sorted(d["metadata"]["name"] for d in out) != sorted([MUTATING, VALIDATING]):
        raise ClusterError("JobSet's webhook manifest changed: expected one of each kind")
    return out


def _apply(api: ApiClient, path: str, body: dict) -> None:
    server_side_apply(api, path, body, FIELD_MANAGER)


def _applied_digest(api: ApiClient) -> str:
    """The digest on the JobSet CRD in the cluster ("" if absent; metadata only)."""
    try:
        resp = api.call_api(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}",
            "GET",
            header_params={"Accept": METADATA},
            auth_settings=["BearerToken"],
            response_type="object",
            _return_http_data_only=True,
        )
    except ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return (resp["metadata"].get("annotations") or {}).get(DIGEST_ANNOTATION, "")


def storage_ready(api: ApiClient) -> bool:
    """A LIST of JobSets answers: 404 before the CRD is served, 429 "storage is
    (re)initializing" for a moment after it (or the API server) changed."""
    try:
        api.call_api(
            f"/apis/{GROUP}/{API_VERSION}/jobsets",
            "GET",
            query_params=[("limit", "1")],
            auth_settings=["BearerToken"],
            response_type="object",
            _return_http_data_only=True,
        )
    except (ApiException, OSError):
        return False
    return True


def prepare(api: ApiClient, timeout: float = 30) -> None:
    """CRD, cert, config and webhook configurations: all JobSet needs before it starts."""
    ensure_cert()
    write_config()
    digest, crd_path = crd()
    if _applied_digest(api) != digest:  # parsed and applied only when its file changed
        _apply(
            api,
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}",
            crd_doc(crd_path, digest),
        )
    # Its manager would fail on a kind the API server does not serve yet.
    deadline = time.monotonic() + timeout
    while not storage_ready(api):
        if time.monotonic() > deadline:
            raise ClusterError(f"{CRD_NAME} not served after {timeout:.0f} s")
        time.sleep(0.1)
    for doc in webhook_configurations():
        plural = doc["kind"].lower() + "s"
        path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{doc['metadata']['name']}"
        _apply(api, path, doc)


def ready() -> bool:
    return http_ok(f"http://127.0.0.1:{jobset_ports()[1]}/readyz")
