"""The ResourceClaimTemplates of a team's namespace for the GPU models served through DRA: one per
device a pod may ask for (each MIG profile of the model, and a whole GPU), one device each; a pod
asking for n devices names the template n times (scheduler/workloads/kinds/pod_template.py).
Members use the same names from kubectl and Helm (`resourceClaimTemplateName`). Kueue reads a
pod's templates to charge its claims, so a template must exist before the work it serves: the
tenant reconcile renders them with the queue. Pure."""

from __future__ import annotations

from catalog import dra_quota
from scheduler.cluster.render.labels import _finish
from scheduler.cluster.render.specs import TenantSpec, _meta


def render_claim_templates(spec: TenantSpec, namespace: str) -> list[dict]:
    if not spec.active:
        return []
    out = []
    for model, product, profile in spec.dra_devices:
        template = dra_quota.claim_template(
            model, profile, 1, namespace=namespace, overrides={model: product}
        )
        template["metadata"] = _meta(spec, template["metadata"]["name"], namespace)
        out.append(_finish(template))
    return out
