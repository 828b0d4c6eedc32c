"""The typed input of a workload's manifests and the pod it runs (pure: dicts out, no Django,
no I/O).

- `ManifestSpec` (with `AutoscalingSpec`, `SecretKeyRef`, `ClaimMount`) is everything a manifest
  is made from; `env_values` and `claim_mounts` turn a workload's stored fields into it.
- `render_pod_template` builds the pod every kind runs (kubespawner style: tests compare it to
  expected dicts); the Job, Deployment and autoscaler around it are `manifests.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from catalog import dra_quota
from scheduler.cluster.render.labels import (
    GPU_PRODUCT_LABEL,
    INSTANCE_LABEL,
    LOCAL_QUEUE,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUEUE_NAME_LABEL,
    QUEUE_PRIORITY_LABEL,
    TENANT_LABEL,
)
from scheduler.workloads.kinds.serving import Probe, ServicePort, container_fields

WORKLOAD_LABEL = "gpu-portal.io/workload"
CONTAINER_NAME = "main"
SHM_VOLUME = "shm"
SHM_MOUNT_PATH = "/dev/shm"  # noqa: S108 - the pod's shared memory, not a temporary file
CLAIM_VOLUME_PREFIX = "data-"  # data-0, data-1, ...: the workload's PersistentVolumeClaims


@dataclass(frozen=True)
class AutoscalingSpec:
    """An inference deployment's elastic range and the pod metrics it follows. The metric names
    are those a Prometheus adapter serves on the custom metrics API (settings
    `AUTOSCALING_GPU_UTIL_METRIC`, `AUTOSCALING_LATENCY_METRIC`,
    `AUTOSCALING_REQUEST_RATE_METRIC`)."""

    min_replicas: int
    max_replicas: int
    target_gpu_util: int | None = None  # percent, averaged over the pods
    target_latency_ms: int | None = None  # averaged over the pods
    target_requests_per_s: Decimal | None = None  # per replica, averaged over the pods
    gpu_util_metric: str = "DCGM_FI_DEV_GPU_UTIL"
    latency_metric: str = "http_request_duration_seconds_p95"
    request_rate_metric: str = "requests_per_second"
    # how long the metric must stay low before it scales down (setting
    # AUTOSCALING_SCALE_DOWN_WINDOW_S; Kubernetes' default is 300 s)
    scale_down_window_s: int = 300


@dataclass(frozen=True)
class SecretKeyRef:
    """An env value read from one key of a Secret in the workload's namespace: the portal
    never sees the value, and the pod waits (CreateContainerConfigError) until it exists."""

    secret: str
    key: str


EnvValue = str | SecretKeyRef


@dataclass(frozen=True)
class ClaimMount:
    """An existing PersistentVolumeClaim of the namespace, mounted into the main container."""

    claim: str
    mount_path: str
    read_only: bool = False


def claim_mounts(volumes: list[dict]) -> tuple[ClaimMount, ...]:
    """A workload's stored volumes (`input.check_volumes`' shape) as the spec's mounts."""
    return tuple(
        ClaimMount(v["claim"], v["mount_path"], bool(v.get("read_only", False))) for v in volumes
    )


def env_values(env: Mapping[str, Any]) -> dict[str, EnvValue]:
    """A workload's stored env (`input.check_env`'s shape: a string, or {"secret", "key"}) as
    the spec's values."""
    return {
        name: SecretKeyRef(value["secret"], value["key"]) if isinstance(value, dict) else value
        for name, value in env.items()
    }


def _env_var(name: str, value: EnvValue) -> dict:
    if isinstance(value, SecretKeyRef):
        ref = {"name": value.secret, "key": value.key}
        return {"name": name, "valueFrom": {"secretKeyRef": ref}}
    return {"name": name, "value": value}


@dataclass(frozen=True)
class ManifestSpec:
    """Everything a manifest is made from (no Django, no I/O)."""

    name: str  # the Kubernetes object's name
    namespace: str
    tenant: str
    workload_id: int
    kind: str  # job | deployment
    image: str
    gpu_model: str
    gpu_product: str  # the model's `nvidia.com/gpu.product` label (GPU feature discovery)
    priority_class: str
    gpus: dict[str, int]  # Kubernetes resource name -> units per pod
    # GPU models served through DRA: (ResourceClaimTemplate, devices per pod) in place of `gpus`
    claims: tuple[tuple[str, int], ...] = ()
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: dict[str, EnvValue] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    replicas: int = 1
    backoff_limit: int = 0
    instance: str = "default"
    autoscaling: AutoscalingSpec | None = None
    # Besides GPUs, as Kubernetes quantities ("" leaves it to the namespace's LimitRange).
    cpu: str = ""
    memory: str = ""
    ephemeral_storage: str = ""
    shm: str = ""  # size of a memory-backed /dev/shm; "" keeps the runtime's small default
    volumes: tuple[ClaimMount, ...] = ()
    env_from_secrets: tuple[str, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    # The GPU nodes' taints the pods tolerate (setting GPU_NODE_TOLERATIONS).
    tolerations: tuple[dict, ...] = ()
    # A job's maximum run time (seconds; None: none), enforced by Kueue.
    max_run_s: int | None = None
    # A gang's placement: its pods in one domain of this node label (topology.py), required
    # or preferred; "" places them anywhere.
    topology_key: str = ""
    topology_required: bool = False
    # An inference service's ports (a Service in front) and readiness/liveness probes.
    ports: tuple[ServicePort, ...] = ()
    probes: dict[str, Probe] = field(default_factory=dict)


def workload_labels(spec: ManifestSpec) -> dict[str, str]:
    return {
        **spec.labels,
        MANAGED_BY_LABEL: MANAGED_BY,
        INSTANCE_LABEL: spec.instance,
        TENANT_LABEL: spec.tenant,
        WORKLOAD_LABEL: str(spec.workload_id),
    }


def queued_labels(spec: ManifestSpec) -> dict[str, str]:
    """Labels of what runs (Job, Deployment, pods): through the team's Kueue queue, ordered and
    preempted by the workload's priority."""
    return {
        **workload_labels(spec),
        QUEUE_NAME_LABEL: LOCAL_QUEUE,
        QUEUE_PRIORITY_LABEL: spec.priority_class,
    }


def _container_resources(spec: ManifestSpec) -> dict[str, str]:
    """GPUs, and cpu, memory and ephemeral storage where the workload names them."""
    amounts = {name: str(units) for name, units in spec.gpus.items()}
    for name, value in (
        ("cpu", spec.cpu),
        ("memory", spec.memory),
        ("ephemeral-storage", spec.ephemeral_storage),
    ):
        if value:
            amounts[name] = value
    return dict(sorted(amounts.items()))


def _volumes(spec: ManifestSpec) -> tuple[list[dict], list[dict]]:
    """(the pod's volumes, the main container's mounts): a memory-backed /dev/shm of its size,
    and the namespace's PersistentVolumeClaims. Both kinds are allowed by Pod Security
    `restricted`."""
    volumes: list[dict] = []
    mounts: list[dict] = []
    if spec.shm:
        memory_backed = {"medium": "Memory", "sizeLimit": spec.shm}
        volumes.append({"name": SHM_VOLUME, "emptyDir": memory_backed})
        mounts.append({"name": SHM_VOLUME, "mountPath": SHM_MOUNT_PATH})
    for i, mount in enumerate(spec.volumes):
        name = f"{CLAIM_VOLUME_PREFIX}{i}"
        claim: dict[str, Any] = {"claimName": mount.claim}
        mounted: dict[str, Any] = {"name": name, "mountPath": mount.mount_path}
        if mount.read_only:
            claim["readOnly"] = True
            mounted["readOnly"] = True
        volumes.append({"name": name, "persistentVolumeClaim": claim})
        mounts.append(mounted)
    return volumes, mounts


def _claims(spec: ManifestSpec) -> list[dict]:
    """The pod's claims: one per device, each from its one-device template (`gpu-0`, `gpu-1`,
    ...; the scheduler allocates them all on the pod's node, Kueue charges each)."""
    templates = [template for template, count in spec.claims for _ in range(count)]
    return [dra_quota.pod_claim(t, f"gpu-{i}")[0] for i, t in enumerate(templates)]


def restricted_container_security() -> dict:
    """A container's securityContext that Pod Security `restricted` (the team namespaces'
    level) admits: every pod the portal renders, and what a bench writes as a member would."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def render_pod_template(spec: ManifestSpec, restart_policy: str) -> dict:
    """A pod that Pod Security `restricted` admits, holding its GPUs (and the cpu, memory and
    ephemeral storage it names) as requests = limits, on a node of its GPU model (GPU feature
    discovery's product label, which is also what Kueue's flavor for the model selects),
    tolerating the GPU nodes' taints, at its priority."""
    resources = _container_resources(spec)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "securityContext": restricted_container_security(),
    }
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    if spec.env:
        container["env"] = [_env_var(k, v) for k, v in sorted(spec.env.items())]
    if spec.env_from_secrets:
        # the whole Secret as env; `env` above wins where a name is in both (Kubernetes' order)
        container["envFrom"] = [{"secretRef": {"name": name}} for name in spec.env_from_secrets]
    container.update(container_fields(spec.ports, spec.probes))
    pod_claims = _claims(spec)
    if pod_claims:
        container["resources"]["claims"] = [{"name": c["name"]} for c in pod_claims]
    volumes, mounts = _volumes(spec)
    if mounts:
        container["volumeMounts"] = mounts
    pod: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "priorityClassName": spec.priority_class,
        "nodeSelector": {GPU_PRODUCT_LABEL: spec.gpu_product},
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
    }
    if pod_claims:
        pod["resourceClaims"] = pod_claims
    if spec.tolerations:
        pod["tolerations"] = [dict(t) for t in spec.tolerations]
    if volumes:
        pod["volumes"] = volumes
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in spec.image_pull_secrets]
    return {"metadata": {"labels": queued_labels(spec)}, "spec": pod}
