"""What the real node holds once its processes run: its images (built here and imported into its
containerd), then its own pods, CoreDNS and kube-network-policies (realnode-addons.yaml), and
the wait until it is Ready with both serving."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import build, fleet, images, realnode
from . import gpu_layout as gl
from .base import PACKAGE_DIR, ClusterError, log, server_side_apply

KNP_METRICS_PORT_OFFSET = 15  # after the node's other ports (realnode.node_ports)


def _pause_dir() -> Path:
    """Kubernetes' pause process (build/pause/linux/pause.c of the cluster's version), compiled
    static: the sandbox every pod's containers share, which containerd would otherwise pull."""
    out = build.cache_root() / "images" / "pause"
    binary = out / "pause"
    if binary.is_file():
        return out
    source = build.cache_root() / "src" / f"kubernetes-{build.KUBERNETES_VERSION}"
    found = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"],
        cwd=source,
        capture_output=True,
        text=True,
        env=build._go_env(),
        check=False,
    ).stdout.strip()
    pause_c = Path(found) / "build" / "pause" / "linux" / "pause.c"
    if not pause_c.is_file():
        raise ClusterError(f"cannot find Kubernetes' pause.c ({pause_c}); run `localcluster build`")
    if not shutil.which("gcc"):
        raise ClusterError("gcc is needed to compile the pause process (Debian's gcc)")
    out.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(
        ["gcc", "-Os", "-static", "-Wall", f'-DVERSION="{build.KUBERNETES_VERSION}"',
         "-o", str(binary), str(pause_c)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        raise ClusterError(f"compiling pause.c failed: {res.stderr.strip()}")
    return out


def _single(ref: str, directory: Path, binary: str) -> tuple[images.Image, dict[str, str]]:
    return (
        images.Image(ref, images.IMAGES_DIR / "single-binary.Containerfile", directory),
        {"BINARY": binary},
    )


def knp_ref() -> str:
    return f"localhost/gpu-portal/kube-network-policies:{images.TAG}"


def node_images(bins: dict[str, Path]) -> list[tuple[images.Image, dict[str, str]]]:
    return [
        _single(realnode.PAUSE_REF, _pause_dir(), "pause"),
        _single(images.coredns_ref(), bins["coredns"].parent, "coredns"),
        _single(knp_ref(), bins["kube-network-policies"].parent, "kube-network-policies"),
        (
            images.Image(
                images.demo_python_ref(),
                images.IMAGES_DIR / "demo-python.Containerfile",
                images.IMAGES_DIR,
            ),
            {},
        ),
    ]


def build_and_load(bins: dict[str, Path], extra: tuple[images.Image, ...] = ()) -> None:
    """Build what changed and import what containerd lacks (seconds when nothing changed)."""
    start = time.monotonic()
    images.ensure_base()
    wanted = node_images(bins) + [(image, {}) for image in extra]
    for image, args in wanted:
        images.build_image(image, args)
    loaded = realnode.NODE_DIR / "containerd" / "loaded"
    for image, _ in wanted:
        images.load(image, realnode.ctr_argv(bins), loaded)
    log(f"node images ready in {time.monotonic() - start:.1f} s")


def _manifests() -> list[dict]:
    text = (PACKAGE_DIR / "realnode-addons.yaml").read_text()
    filled = text.format(
        coredns_image=images.coredns_ref(),
        knp_image=knp_ref(),
        cluster_dns=realnode.CLUSTER_DNS,
        node=realnode.NODE_NAME,
        knp_metrics_port=realnode.node_ports()["kubelet"] + KNP_METRICS_PORT_OFFSET,
    )
    return [doc for doc in yaml.safe_load_all(filled) if doc]


def _path(doc: dict) -> str:
    group_version = doc["apiVersion"]
    plural = {"Deployment": "deployments", "DaemonSet": "daemonsets", "Service": "services",
              "ConfigMap": "configmaps", "ServiceAccount": "serviceaccounts",
              "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}[
        doc["kind"]
    ]  # fmt: skip
    base = f"/api/{group_version}" if group_version == "v1" else f"/apis/{group_version}"
    ns = doc["metadata"].get("namespace")
    return (
        f"{base}/namespaces/{ns}/{plural}/{doc['metadata']['name']}"
        if ns
        else (f"{base}/{plural}/{doc['metadata']['name']}")
    )


def apply_addons(api: client.ApiClient) -> None:
    for doc in _manifests():
        server_side_apply(api, _path(doc), doc, "gpu-portal-localcluster")


def _ready(node: client.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def wait_ready(api: client.ApiClient, timeout: float = 120) -> None:
    """The node Ready, CoreDNS answering (Ready) and kube-network-policies running."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    deadline = time.monotonic() + timeout
    what = "the real node to register"
    while time.monotonic() < deadline:
        try:
            node = core.read_node(realnode.NODE_NAME)
            what = "the real node to be Ready"
            if _ready(node):
                what = "CoreDNS and kube-network-policies on the real node"
                dns = apps.read_namespaced_deployment("coredns", "kube-system")
                knp = apps.read_namespaced_daemon_set("kube-network-policies", "kube-system")
                if (dns.status.ready_replicas or 0) >= 1 and (knp.status.number_ready or 0) >= 1:
                    return
        except ApiException as exc:
            if exc.status != 404:
                raise
        time.sleep(0.5)
    raise ClusterError(
        f"timed out after {timeout:.0f} s waiting for {what}; see {realnode.NODE_DIR / 'logs'} "
        "and .local/cluster/logs/{containerd,kubelet,kube-proxy}.log"
    )


def advertise_gpus(
    api: client.ApiClient,
    model: str,
    gpus: int,
    mig_config: str | None = None,
    device_plugin_config: str = "default",
) -> dict[str, int]:
    """Make the real node a GPU node of `model`, as the KWOK nodes are: GPU feature discovery's
    labels, the GPU taints, and the devices in its status (the documented way for extended
    resources no device plugin serves). Its pods run on CPU. Returns the resources."""
    resources, labels = gl.node_gpu_state(model, gpus, mig_config, device_plugin_config)
    labels = {**labels, **fleet.fleet_gpu_labels()}
    if gl.LABEL_MIG_CONFIG in labels:
        labels[gl.LABEL_MIG_STATE] = "success"
    labels[gl.LABEL_DP_STATE] = "success"
    core = client.CoreV1Api(api)
    node = core.read_node(realnode.NODE_NAME)
    taints = [t.to_dict() for t in node.spec.taints or []]
    keys = {(t["key"], t["effect"]) for t in taints}
    taints += [t for t in fleet.gpu_taints() if (t["key"], t["effect"]) not in keys]
    annotations = {
        fleet.ANN_MIG_OBSERVED: mig_config or "",
        fleet.ANN_MIG_EFFECTIVE: mig_config or "",
        fleet.ANN_DP_OBSERVED: device_plugin_config,
        fleet.ANN_DP_EFFECTIVE: device_plugin_config,
    }
    core.patch_node(
        realnode.NODE_NAME,
        {"metadata": {"labels": labels, "annotations": annotations}, "spec": {"taints": taints}},
    )
    status = {k: str(v) for k, v in resources.items()}
    core.patch_node_status(
        realnode.NODE_NAME, {"status": {"capacity": status, "allocatable": status}}
    )
    return resources


def withdraw_gpus(api: client.ApiClient) -> None:
    """The real node back to a plain node: no GPU labels, taints or devices."""
    core = client.CoreV1Api(api)
    node = core.read_node(realnode.NODE_NAME)
    gpu_keys = {t["key"] for t in fleet.gpu_taints()}
    labels = {
        k: None
        for k in node.metadata.labels or {}
        if k.startswith("nvidia.com/") or k in fleet.fleet_gpu_labels() or k == gl.LABEL_DP_STATE
    }
    annotations = dict.fromkeys(
        (
            fleet.ANN_MIG_OBSERVED,
            fleet.ANN_MIG_EFFECTIVE,
            fleet.ANN_DP_OBSERVED,
            fleet.ANN_DP_EFFECTIVE,
        )
    )
    taints = [t.to_dict() for t in node.spec.taints or [] if t.key not in gpu_keys]
    core.patch_node(
        realnode.NODE_NAME,
        {"metadata": {"labels": labels, "annotations": annotations}, "spec": {"taints": taints}},
    )
    ops = [
        {"op": "remove", "path": f"/status/{field}/{key.replace('/', '~1')}"}
        for field in ("capacity", "allocatable")
        for key in (getattr(node.status, field) or {})
        if key.startswith("nvidia.com/")
    ]
    if ops:
        core.api_client.call_api(
            f"/api/v1/nodes/{realnode.NODE_NAME}/status",
            "PATCH",
            header_params={"Content-Type": "application/json-patch+json"},
            body=ops,
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )
