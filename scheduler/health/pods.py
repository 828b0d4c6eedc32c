"""The GPU pods on a node, in the MIG rollout's eviction order (lowest priority first), and
whose they are: the team by its namespace's label, the portal's workload by its label."""

from __future__ import annotations

from django.conf import settings

from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.render.labels import INSTANCE_LABEL, TENANT_LABEL
from scheduler.mig.rollout import drain_order
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.models import Workload
from tenants.models import Tenant


def gpu_pods(kube: KubeGateway, node: str) -> list[dict]:
    return drain_order(kube.list("Pod", field_selector=f"spec.nodeName={node}"))


def tenants_by_namespace(kube: KubeGateway) -> dict[str, Tenant]:
    slugs = {
        ns["metadata"]["name"]: (ns["metadata"].get("labels") or {}).get(TENANT_LABEL)
        for ns in kube.list("Namespace", label_selector=TENANT_LABEL)
    }
    tenants = Tenant.objects.in_bulk([s for s in slugs.values() if s], field_name="slug")
    return {ns: tenants[slug] for ns, slug in slugs.items() if slug in tenants}


def workload_of(pod: dict) -> Workload | None:
    labels = pod["metadata"].get("labels") or {}
    value = labels.get(WORKLOAD_LABEL, "")
    if labels.get(INSTANCE_LABEL) != settings.PORTAL_INSTANCE or not value.isdigit():
        return None
    return Workload.objects.filter(pk=int(value)).first()
