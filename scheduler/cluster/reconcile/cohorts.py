"""A Cohort per department, level-triggered: render what the database says, apply what differs,
delete the Cohorts of this portal instance whose department is gone (its teams' queues move to
the organisation's cohort in the same full reconcile)."""

from __future__ import annotations

from django.conf import settings

from catalog import dra_quota, gpu_serving, slices
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.converge import (
    Outcome,
    execute,
    key_str,
    managed_selector,
    plan_converge,
)
from scheduler.cluster.reconcile.specs import cohort_name, department_cohort, flavor_name
from scheduler.cluster.render.cohorts import CohortLine, DepartmentSpec, render_cohorts
from scheduler.cluster.render.labels import HASH_ANNOTATION
from tenants.models import Department


def _line(model: str, lending: int | None, borrowing: int | None) -> CohortLine:
    """A department's limits on a model in slices; a DRA model's in Kueue's multiprocessors, as
    its teams' queue lines are (reconcile/specs.py)."""
    if not gpu_serving.through_dra(model):
        return CohortLine(flavor_name(model), slices.SLICE_RESOURCE, lending, borrowing)

    def sms(n: int | None) -> int | None:
        return None if n is None else dra_quota.slice_quota(model, n)

    return CohortLine(flavor_name(model), dra_quota.QUOTA_RESOURCE, sms(lending), sms(borrowing))


def department_specs() -> list[DepartmentSpec]:
    unit_is_slices = settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES
    return [
        DepartmentSpec(
            slug=d.slug,
            name=d.name,
            cohort=department_cohort(d.slug),
            parent=cohort_name(),
            instance=settings.PORTAL_INSTANCE,
            lines=tuple(
                _line(q.gpu_model, q.lending_limit, q.borrowing_limit) for q in d.quotas.all()
            )
            if unit_is_slices
            else (),
        )
        for d in Department.objects.prefetch_related("quotas")
    ]


def reconcile_cohorts(kube: KubeGateway) -> Outcome:
    """Converge this instance's Cohorts (one list call; a no-op run writes nothing)."""
    desired = render_cohorts(department_specs())
    live = kube.list("Cohort", label_selector=managed_selector())
    previously = {key_str(m): m["metadata"]["annotations"][HASH_ANNOTATION] for m in desired}
    return execute(kube, plan_converge(desired, live, previously))
