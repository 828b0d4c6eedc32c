"""Asking for a plan's rollout, and abandoning one: the one way a MIG plan reaches the cluster.

Making a plan is `plans.create_plan`; the rollout itself (`rollout.apply_plan`) runs only in the
`apply_plan` task, which this queues once the request's transaction commits. Here, not in
`plans`, because the task module imports the rollout, which imports `plans`.
"""

from __future__ import annotations

from django.db import transaction

from core import audit
from core.errors import InvalidInput, InvalidTransition
from core.permissions import require_platform_admin
from scheduler.mig import rollout, tasks
from scheduler.mig.models import Plan


def request_plan_apply(*, actor, plan: Plan, nodes: list[str] | None = None) -> Plan:
    """Queue the rollout of all the plan's changed nodes not applied yet, or only of `nodes`
    (platform admins only; one `plan.apply_requested` event). A plan being applied is refused,
    unless its rollout is stuck (its worker died): then the task resumes it."""
    require_platform_admin(actor, "apply MIG plans")
    nodes = list(dict.fromkeys(nodes)) if nodes else None
    with transaction.atomic():
        plan = Plan.objects.select_for_update().get(pk=plan.pk)
        stuck = rollout.is_stuck(plan)
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


def abandon_plan(*, actor, plan: Plan) -> Plan:
    """Stop a rollout (platform admins only): the node in progress finishes its step, no
    further node starts. Nodes are left as they are; the plan lists those still cordoned.
    Applying the plan again later starts a new rollout from the nodes not applied."""
    require_platform_admin(actor, "abandon MIG rollouts")
    with transaction.atomic():
        plan = Plan.objects.select_for_update().get(pk=plan.pk)
        if plan.status != Plan.Status.APPLYING:
            raise InvalidTransition(
                f"plan #{plan.pk} is {plan.status}, not being applied: nothing to abandon"
            )
        cordoned = [e["node"] for e in plan.nodes if e.get("cordoned")]
        plan.transition("abandon")
        plan.error = f"abandoned by {actor.get_username()}" + (
            f"; still cordoned: {', '.join(cordoned)}" if cordoned else ""
        )
        plan.save()
        audit.record(
            actor=actor,
            verb="plan.abandoned",
            obj=plan,
            tenant=None,
            before={"status": Plan.Status.APPLYING},
            after={"status": plan.status, "cordoned": cordoned},
        )
    return plan
