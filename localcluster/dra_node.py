"""A KWOK GPU node served the DRA way: what NVIDIA's DRA driver with DynamicMIG publishes for it
(ResourceSlices of its GPUs and every MIG placement they could cut, the driver's DeviceClasses),
and no extended resources. The real kube-scheduler allocates the claims of a pod against those
slices; KWOK runs the pod. Nothing is drained and no layout is rolled out: a placement is "cut"
by being allocated.

The slices are owned by the Node (as the driver's kubelet plugin makes them), so the garbage
collector deletes them with it: a node that goes takes its devices with it, and the work on it is
requeued by the cluster (Kueue and the Job controller), as on a real cluster.

`ensure` is idempotent (server-side apply); `remove` deletes the node. `python -m localcluster
dra-node --gpus A100-40GB:1` adds one by hand; the tests and `make run` call `ensure`.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from catalog import dra_devices

from . import fleet
from . import gpu_layout as gl
from .dra_slices import device_classes, resource_slices

# The label the stand-in and the tests find DRA nodes by (the driver itself sets none: the
# portal reads which models are served so from its setting GPU_DRA_MODELS).
DRA_LABEL = "gpu-portal.local/dra"
FIELD_MANAGER = "gpu-portal-localcluster"
DEFAULT_NAME = "gpu-a100-40gb-dra-0"
# What the device plugin and the MIG manager label; a DRA node has neither.
DEVICE_PLUGIN = (
    gl.LABEL_MIG_CONFIG,
    gl.LABEL_MIG_STATE,
    gl.LABEL_DP_CONFIG,
    gl.LABEL_DP_STATE,
    "nvidia.com/mig.strategy",
)


def node_manifest(name: str, model: str, gpus: int) -> dict[str, Any]:
    """The fleet's node of `gpus` GPUs of `model`, without the device plugin's resources or its
    MIG labels: a DRA node offers its GPUs through ResourceSlices only."""
    manifest = fleet.node_manifest({"name": name, "model": model, "gpus": gpus})
    status = manifest["status"]
    for field in ("capacity", "allocatable"):
        status[field] = {k: v for k, v in status[field].items() if not k.startswith("nvidia.com/")}
    labels = manifest["metadata"]["labels"]
    for key in [k for k in labels if k.startswith(gl.MIG_LABEL_PREFIX) or k in DEVICE_PLUGIN]:
        del labels[key]
    labels[DRA_LABEL] = "true"
    return manifest


def _apply(dyn: dynamic.DynamicClient, body: dict[str, Any]) -> dict[str, Any]:
    resource = dyn.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    return resource.server_side_apply(
        body=body, name=body["metadata"]["name"], field_manager=FIELD_MANAGER, force_conflicts=True
    ).to_dict()


def ensure(
    api: client.ApiClient, model: str, gpus: int = 1, name: str = DEFAULT_NAME, timeout: float = 60
) -> str:
    """Create (or bring up to date) a DRA node of `gpus` GPUs of `model`, its slices and the
    driver's DeviceClasses; wait until KWOK has it Ready. Returns its name."""
    core = client.CoreV1Api(api)
    dyn = dynamic.DynamicClient(api)
    wanted = node_manifest(name, model, gpus)
    try:
        node = core.read_node(name)
    except ApiException as exc:
        if exc.status != 404:
            raise
        node = core.create_node(wanted)
    # Classes without extendedResourceName: the device plugin serves nvidia.com/gpu on the
    # other nodes, and Kueue would count every nvidia.com/gpu request as a DRA one.
    for body in device_classes(extended_resource_name=False):
        _apply(dyn, body)
    owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.metadata.uid}
    for body in resource_slices(name, model, gpus):
        body["metadata"]["ownerReferences"] = [owner]
        _apply(dyn, body)
    fleet.wait_nodes_ready(api, [name], timeout=timeout)
    return name


def slices_of(api: client.ApiClient, name: str) -> list[dict[str, Any]]:
    """The ResourceSlices the driver publishes for node `name`."""
    dyn = dynamic.DynamicClient(api)
    resource = dyn.resources.get(api_version=dra_devices.RESOURCE_API, kind="ResourceSlice")
    found = resource.get(field_selector=f"spec.nodeName={name}").to_dict()
    return [s for s in found.get("items") or [] if s["spec"]["driver"] == dra_devices.DRIVER]


def remove(api: client.ApiClient, name: str = DEFAULT_NAME, timeout: float = 60) -> None:
    """Delete the node (its pods are evicted by the node lifecycle controller, its slices by the
    garbage collector) and wait until its slices are gone."""
    core = client.CoreV1Api(api)
    try:
        core.delete_node(name)
    except ApiException as exc:
        if exc.status != 404:
            raise
    deadline = time.monotonic() + timeout
    while slices_of(api, name):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the ResourceSlices of {name} are still there after {timeout} s")
        time.sleep(0.5)
