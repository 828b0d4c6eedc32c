"""A workload row as the pure manifests' input (`ManifestSpec`): its resource classes'
Kubernetes resource names, its GPU model's product label, and the portal's settings (instance,
the GPU nodes' tolerations, the autoscaling metrics)."""

from __future__ import annotations

from django.conf import settings

from catalog import dra_quota, gpu_serving
from catalog.models import ResourceClass
from catalog.product_labels import product_label
from scheduler.workloads.kinds import topology
from scheduler.workloads.kinds.pod_template import (
    AutoscalingSpec,
    ManifestSpec,
    claim_mounts,
    env_values,
)
from scheduler.workloads.kinds.serving import service_ports, service_probes
from scheduler.workloads.models import Workload


def spec_for(workload: Workload) -> ManifestSpec:
    classes = {
        rc.slug: rc for rc in ResourceClass.objects.filter(slug__in=list(workload.resources))
    }
    return ManifestSpec(
        name=workload.k8s_name,
        namespace=workload.namespace,
        tenant=workload.tenant.slug,
        workload_id=workload.pk,
        kind=workload.kind,
        image=workload.image,
        gpu_model=workload.gpu_model,
        gpu_product=product_label(workload.gpu_model),
        priority_class=workload.priority_class,
        gpus={
            classes[s].resource_name: int(n)
            for s, n in workload.resources.items()
            if not gpu_serving.through_dra(classes[s].gpu_model)
        },
        claims=tuple(
            (dra_template(classes[s]), int(n))
            for s, n in workload.resources.items()
            if gpu_serving.through_dra(classes[s].gpu_model)
        ),
        command=tuple(workload.command or ()),
        args=tuple(workload.args or ()),
        env=env_values(workload.env or {}),
        labels=dict(workload.labels or {}),
        replicas=workload.replicas,
        backoff_limit=workload.backoff_limit,
        instance=settings.PORTAL_INSTANCE,
        autoscaling=_autoscaling_spec(workload),
        cpu=workload.cpu,
        memory=workload.memory,
        ephemeral_storage=workload.ephemeral_storage,
        shm=workload.shm,
        volumes=claim_mounts(workload.volumes or []),
        env_from_secrets=tuple(workload.env_from_secrets or ()),
        image_pull_secrets=tuple(workload.image_pull_secrets or ()),
        tolerations=tuple(settings.GPU_NODE_TOLERATIONS),
        max_run_s=workload.max_run_s,
        **_placement(workload),
        ports=service_ports(workload.ports or []),
        probes=service_probes(workload.probes or {}),
    )


def dra_template(rc: ResourceClass) -> str:
    """The one-device ResourceClaimTemplate a class's devices come from on a DRA model (the
    tenant reconcile renders it: scheduler/cluster/render/claims.py)."""
    profile = rc.profile if rc.kind == ResourceClass.Kind.MIG else dra_quota.WHOLE_GPU
    return dra_quota.claim_template_name(rc.gpu_model, profile, 1)


def _placement(workload: Workload) -> dict:
    """The gang's topology as the spec's fields; a level the settings no longer name places the
    pods anywhere (it was checked at submit)."""
    try:
        placement = topology.parse(workload.topology, settings.GPU_TOPOLOGY_LEVELS)
    except ValueError:
        placement = None
    if placement is None:
        return {}
    return {"topology_key": placement.key, "topology_required": placement.required}


def _autoscaling_spec(workload: Workload) -> AutoscalingSpec | None:
    if workload.max_replicas is None:
        return None
    return AutoscalingSpec(
        min_replicas=workload.replicas,
        max_replicas=workload.max_replicas,
        target_gpu_util=workload.target_gpu_util,
        target_latency_ms=workload.target_latency_ms,
        target_requests_per_s=workload.target_requests_per_s,
        gpu_util_metric=settings.AUTOSCALING_GPU_UTIL_METRIC,
        latency_metric=settings.AUTOSCALING_LATENCY_METRIC,
        request_rate_metric=settings.AUTOSCALING_REQUEST_RATE_METRIC,
        scale_down_window_s=settings.AUTOSCALING_SCALE_DOWN_WINDOW_S,
    )
