"""Asking for a plan's rollout: the one way a MIG plan reaches the cluster.

Making a plan is `plans.create_plan`; the rollout itself (`rollout.apply_plan`) runs only in the
`apply_plan` task, which this queues once the request's transaction commits. Here, not in
`plans`, because the task module imports the rollout, which imports `plans`.
"""

from __future__ import annotations

from django.db import transaction

from core.errors import InvalidInput, InvalidTransition
from scheduler.mig import tasks
from scheduler.mig.models import Plan
from tenants import audit
from tenants.permissions import require_platform_admin


def request_plan_apply(*, actor, plan: Plan, nodes: list[str] | None = None) -> Plan:
    """Queue the rollout of all the plan's changed nodes not applied yet, or only of `nodes`
    (platform admins only; one `plan.apply_requested` event). A plan being applied is refused,
    unless its rollout is stuck (its worker died): then the task resumes it."""
    require_platform_admin(actor, "apply MIG plans")
    nodes = list(dict.fromkeys(nodes)) if nodes else None
    with transaction.atomic():
        plan = Plan.objects.select_for_update().get(pk=plan.pk)
        stuck = plan.is_stuck()
        if plan.status == Plan.Status.APPLYING and not stuck:
            raise InvalidTransition(f"plan #{plan.pk} is being applied already")
        changed = {e["node"] for e in plan.changed_nodes}
        unknown = [n for n in nodes or [] if n not in changed]
        if unknown:
            raise InvalidInput(
                f"plan #{plan.pk} changes nothing on {', '.join(unknown)}", field="node"
            )
        pending = [
            e["node"]
            for e in plan.changed_nodes
            if e["state"] != "applied" and (nodes is None or e["node"] in nodes)
        ]
        if not pending and not stuck:
            raise InvalidTransition(f"plan #{plan.pk} has nothing left to apply")
        audit.record(
            actor=actor,
            verb="plan.apply_requested",
            obj=plan,
            tenant=None,
            before={"status": plan.status},
            after={"nodes": nodes or "all", "pending": pending},
        )
        plan_id, actor_id = plan.pk, actor.pk
        transaction.on_commit(
            lambda: tasks.apply_plan.delay(plan_id=plan_id, nodes=nodes, actor_id=actor_id)
        )
    return plan
