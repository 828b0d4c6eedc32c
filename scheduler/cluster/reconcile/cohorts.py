"""A Cohort per department, level-triggered: render what the database says, apply what differs,
delete the Cohorts of this portal instance whose department is gone (its teams' queues move to
the organisation's cohort in the same full reconcile)."""

from __future__ import annotations

from django.conf import settings

from catalog import slices
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
                CohortLine(
                    flavor_name(q.gpu_model),
                    slices.SLICE_RESOURCE,
                    q.lending_limit,
                    q.borrowing_limit,
                )
                for q in d.quotas.all()
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
