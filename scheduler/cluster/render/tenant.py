"""Everything one tenant should have, in the order it is applied."""

from __future__ import annotations

from scheduler.cluster.render.access import render_access
from scheduler.cluster.render.claims import render_claim_templates
from scheduler.cluster.render.kueue import render_queues
from scheduler.cluster.render.namespace import render_limit_range, render_namespace, render_quotas
from scheduler.cluster.render.network import render_network_policies
from scheduler.cluster.render.specs import TenantSpec


def render_tenant(spec: TenantSpec) -> list[dict]:
    """Everything one tenant should have: the Namespace first, then what lives in it."""
    namespace = render_namespace(spec)
    ns = namespace["metadata"]["name"]
    return [
        namespace,
        # the queue first: a pod created in the namespace before its LocalQueue exists gets no
        # queue name and would never be admitted
        *render_queues(spec, ns),
        # before any pod names them: Kueue reads a pod's templates to charge its claims
        *render_claim_templates(spec, ns),
        *render_quotas(spec, ns),
        render_limit_range(spec, ns),
        *render_access(spec, ns),
        *render_network_policies(spec, ns),
    ]
