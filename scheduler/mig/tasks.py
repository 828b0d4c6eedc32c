"""The MIG rollout as a chain of tasks: each applies one node and queues the next, so a rollout
over any number of slow nodes never meets a task's time limit; a periodic check resumes a chain
whose worker died (its lease in PostgreSQL is free: `rollout.is_stuck`)."""

from django.contrib.auth import get_user_model

from core.permissions import is_platform_admin
from core.tasks import portal_task
from scheduler.cluster import kube
from scheduler.mig import reshaping, rollout
from scheduler.mig.models import Plan

# One step: drain (MIG_DRAIN_TIMEOUT_S) + relabel and wait (MIG_NODE_TIMEOUT_S) + margin. A live
# step holds the plan's lease, so it never looks stuck however long it takes.
STEP_SOFT_LIMIT_S, STEP_HARD_LIMIT_S = Plan.step_limits_s()


@portal_task(
    name="scheduler.tasks.apply_plan",
    soft_time_limit=STEP_SOFT_LIMIT_S,
    time_limit=STEP_HARD_LIMIT_S,
)
def apply_plan(
    *,
    plan_id: int,
    nodes: list[str] | None = None,
    actor_id: int | None = None,
    rollout_id: str | None = None,
) -> str:
    """Without `rollout_id`: start the rollout for the platform admin who asked
    (`orders.request_plan_apply` queues this; anyone else is refused, whoever queued
    it), or resume it if its worker died; a plan being applied or already applied is left
    alone. Then (or with `rollout_id`, as the next link of the chain) apply one node and queue
    the next."""
    actor = get_user_model().objects.filter(pk=actor_id).first() if actor_id else None
    if not is_platform_admin(actor):
        return "refused: only platform admins may apply MIG plans"
    if not Plan.objects.filter(pk=plan_id).exists():
        return "no such plan"
    gateway = kube.gateway()
    # The lease from the start: a second message for this plan (a resume check, a redelivery)
    # finds it held and leaves the rollout to this worker.
    with rollout.lease(plan_id) as held:
        if not held:
            return "another worker is applying this plan"
        if rollout_id is None:
            plan = Plan.objects.get(pk=plan_id)
            if plan.status == Plan.Status.APPLYING and not rollout.is_stuck(plan):
                return plan.status  # its chain is handing over to the next step
            if plan.status == Plan.Status.APPLIED and not nodes:
                return plan.status
            rollout_id = rollout.begin(gateway, plan_id, actor=actor, nodes=nodes).rollout_id
        more = rollout.step(gateway, plan_id, rollout_id, actor=actor)
    if more:  # queued once the lease is free; the plan's heartbeat covers the hand-over
        apply_plan.delay(plan_id=plan_id, nodes=nodes, actor_id=actor_id, rollout_id=rollout_id)
    return Plan.objects.get(pk=plan_id).status


@portal_task(name="scheduler.tasks.resume_stuck_rollouts")
def resume_stuck_rollouts() -> int:
    """A rollout whose chain broke (worker killed, message lost) is taken up again where it
    stopped, for the admin who asked for it (beat, every MIG_ROLLOUT_RESUME_EVERY_S)."""
    resumed = 0
    for plan in Plan.objects.filter(status=Plan.Status.APPLYING):
        if plan.applied_by_id and rollout.is_stuck(plan):
            apply_plan.delay(plan_id=plan.pk, actor_id=plan.applied_by_id)
            resumed += 1
    return resumed


@portal_task(
    name="scheduler.tasks.follow_queue_layouts",
    soft_time_limit=STEP_SOFT_LIMIT_S * 2,
    time_limit=STEP_HARD_LIMIT_S * 2,
)
def follow_queue_layouts() -> int:
    """Elastic layouts: idle GPUs re-shaped for asks that wait for a shape (one run)."""
    return len(reshaping.run_once(kube.gateway()))
