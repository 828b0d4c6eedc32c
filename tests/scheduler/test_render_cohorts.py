"""A Kueue Cohort per department under the organisation's (issue 34 item 1): pure rendering, the
teams' queues in it, and the converge that prunes a deleted department's Cohort."""

import pytest

from catalog.slices import SLICE_RESOURCE
from scheduler.cluster.reconcile.cohorts import department_specs
from scheduler.cluster.reconcile.converge import plan_converge
from scheduler.cluster.reconcile.specs import build_specs, cohort_name, department_cohort
from scheduler.cluster.render.cohorts import (
    CohortLine,
    DepartmentSpec,
    render_cohort,
    render_cohorts,
)
from scheduler.cluster.render.kueue import render_cluster_queue
from scheduler.cluster.render.labels import HASH_ANNOTATION
from tenants.services import departments as department_services


def spec(*lines, slug="research"):
    return DepartmentSpec(
        slug=slug,
        name="Research",
        cohort=f"gpu-portal-x-{slug}",
        parent="gpu-portal-x",
        instance="x",
        lines=tuple(lines),
    )


def test_a_department_cohort_sits_under_the_organisations_with_its_limits():
    cohort = render_cohort(
        spec(
            CohortLine("a100-80gb", SLICE_RESOURCE, lending_limit=0, borrowing_limit=None),
            CohortLine("h100-80gb", SLICE_RESOURCE, lending_limit=7, borrowing_limit=14),
        )
    )

    assert cohort["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert cohort["kind"] == "Cohort"
    assert cohort["metadata"]["name"] == "gpu-portal-x-research"
    assert cohort["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "gpu-portal",
        "gpu-portal.io/instance": "x",
        "gpu-portal.io/department": "research",
    }
    assert cohort["metadata"]["annotations"]["gpu-portal.io/display-name"] == "Research"
    assert HASH_ANNOTATION in cohort["metadata"]["annotations"]
    assert cohort["spec"] == {
        "parentName": "gpu-portal-x",
        "resourceGroups": [
            {
                "coveredResources": [SLICE_RESOURCE],
                "flavors": [
                    {
                        "name": "a100-80gb",
                        # no quota of its own: the teams' grants are the department's subtree
                        "resources": [
                            {"name": SLICE_RESOURCE, "nominalQuota": "0", "lendingLimit": "0"}
                        ],
                    },
                    {
                        "name": "h100-80gb",
                        "resources": [
                            {
                                "name": SLICE_RESOURCE,
                                "nominalQuota": "0",
                                "lendingLimit": "7",
                                "borrowingLimit": "14",
                            }
                        ],
                    },
                ],
            }
        ],
    }


def test_a_department_without_limits_is_only_a_node_of_the_tree():
    line = CohortLine("a100-80gb", SLICE_RESOURCE, lending_limit=None, borrowing_limit=None)
    assert render_cohort(spec(line))["spec"] == {"parentName": "gpu-portal-x"}


def test_cohorts_come_sorted_and_a_limit_change_changes_the_hash():
    a, b = spec(slug="b-dept"), spec(slug="a-dept")
    assert [c["metadata"]["name"] for c in render_cohorts([a, b])] == [
        "gpu-portal-x-a-dept",
        "gpu-portal-x-b-dept",
    ]
    lend = render_cohort(spec(CohortLine("a100-80gb", SLICE_RESOURCE, 0, None)))
    lend_more = render_cohort(spec(CohortLine("a100-80gb", SLICE_RESOURCE, 7, None)))
    assert (
        lend["metadata"]["annotations"][HASH_ANNOTATION]
        != lend_more["metadata"]["annotations"][HASH_ANNOTATION]
    )


def test_a_deleted_departments_cohort_is_pruned():
    kept = render_cohort(spec(slug="kept"))
    gone = render_cohort(spec(slug="gone"))
    plan = plan_converge([kept], [kept, gone], {})
    assert plan.to_apply == []
    assert [c["metadata"]["name"] for c in plan.to_delete] == ["gpu-portal-x-gone"]


@pytest.mark.django_db
def test_a_department_teams_queue_is_in_the_departments_cohort(world, settings):
    settings.PORTAL_INSTANCE = "x"
    dept = department_services.create_department(actor=world.admin, slug="research", name="R")
    department_services.set_department_quota(
        actor=world.admin, department=dept, gpu_model="A100-80GB", slices=14, lending_limit=0
    )
    department_services.assign_team(actor=world.admin, tenant=world.tenant, department=dept)
    world.tenant.refresh_from_db()

    specs = build_specs([world.tenant, world.other_tenant])
    mine = render_cluster_queue(specs[world.tenant.pk], "ns-a")
    other = render_cluster_queue(specs[world.other_tenant.pk], "ns-b")

    assert mine["spec"]["cohortName"] == department_cohort("research") == "gpu-portal-x-research"
    assert other["spec"]["cohortName"] == cohort_name() == "gpu-portal-x"
    (research,) = department_specs()
    assert research.parent == "gpu-portal-x"
    assert research.lines == (CohortLine("a100-80gb", SLICE_RESOURCE, 0, None),)
