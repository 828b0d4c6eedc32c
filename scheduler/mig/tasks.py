"""The MIG rollout as a task: one worker rolls a plan out, node by node."""

from django.contrib.auth import get_user_model

from core.permissions import is_platform_admin
from core.tasks import portal_task
from scheduler.cluster import kube
from scheduler.mig import rollout
from scheduler.mig.models import Plan


@portal_task(name="scheduler.tasks.apply_plan", soft_time_limit=540, time_limit=600)
def apply_plan(*, plan_id: int, nodes: list[str] | None = None, actor_id: int | None = None) -> str:
    """Roll a plan out for the platform admin who asked (`services.request_plan_apply` queues
    this); anyone else is refused, whoever queued it. A plan already applied (or being applied)
    is left alone, unless its rollout is stuck (its worker died): then it resumes where it
    stopped. Limits stay under the broker's visibility timeout."""
    actor = get_user_model().objects.filter(pk=actor_id).first() if actor_id else None
    if not is_platform_admin(actor):
        return "refused: only platform admins may apply MIG plans"
    plan = Plan.objects.filter(pk=plan_id).first()
    if plan is None:
        return "no such plan"
    if plan.status == Plan.Status.APPLYING and not plan.is_stuck():
        return plan.status  # another worker is on it
    if plan.status == Plan.Status.APPLIED and not nodes:
        return plan.status
    return rollout.apply_plan(kube.gateway(), plan_id, actor=actor, nodes=nodes).status
