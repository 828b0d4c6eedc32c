"""Everything one tenant should have, in the order it is applied."""

from __future__ import annotations

from scheduler.cluster.render.access import render_access
from scheduler.cluster.render.claims import render_claim_templates
from scheduler.cluster.render.kueue import render_queues
from scheduler.cluster.render.multikueue import with_admission_checks
from scheduler.cluster.render.namespace import render_limit_range, render_namespace, render_quotas
from scheduler.cluster.render.network import render_network_policies
from scheduler.cluster.render.specs import TenantSpec


def render_tenant(spec: TenantSpec) -> list[dict]:
    """Everything one tenant should have: the Namespace first, then what lives in it."""
    namespace = render_namespace(spec)
    ns = namespace["metadata"]["name"]
    queues = render_queues(spec, ns)
    if spec.dispatch_check:  # on a fleet's manager: Kueue admits, MultiKueue runs it elsewhere
        queues = [
            with_admission_checks(q, [spec.dispatch_check]) if q["kind"] == "ClusterQueue" else q
            for q in queues
        ]
    return [
        namespace,
        # the queue first: a pod created in the namespace before its LocalQueue exists gets no
        # queue name and would never be admitted
        *queues,
        # before any pod names them: Kueue reads a pod's templates to charge its claims
        *render_claim_templates(spec, ns),
        *render_quotas(spec, ns),
        render_limit_range(spec, ns),
        *render_access(spec, ns),
        *render_network_policies(spec, ns),
    ]
