"""Departments as Kueue's hierarchical cohorts, on the real local cluster (issue 34 item 1): a
team borrows its sister team's idle units without limit, and another department's only as far
as that department lends (its Cohort's lendingLimit), though the other department idles."""

import time

import pytest

from catalog.services import set_pool
from scheduler.cluster.reconcile.cohorts import reconcile_cohorts
from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.cluster.reconcile.specs import cohort_name, department_cohort
from tenants.services import departments as department_services
from tests.scheduler.cluster_helpers import unique_slug, wait_for
from tests.scheduler.test_fair_sharing_cluster import queue_job, workloads_by_state
from tests.scheduler.test_kueue_cluster import h100_mig, team

__all__ = ["h100_mig"]  # the fixture, shared with test_kueue_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

UNIT = 3  # slices of one H100 3g.40gb


@pytest.fixture
def departments(world, kube, h100_mig, settings):
    """research (team A and team B, 2 units each) and product (team C, 4 units, lending one
    unit's slices to other departments), in a cohort tree of this test's own."""
    settings.PORTAL_INSTANCE = unique_slug("dept")
    set_pool(actor=world.admin, resource_class=h100_mig, borrowing_limit=None, reclaim_grace_s=0)
    research = department_services.create_department(
        actor=world.admin, slug="research", name="Research"
    )
    department_services.set_department_quota(
        actor=world.admin, department=research, gpu_model="H100-80GB", slices=4 * UNIT
    )
    product = department_services.create_department(
        actor=world.admin, slug="product", name="Product"
    )
    department_services.set_department_quota(
        actor=world.admin,
        department=product,
        gpu_model="H100-80GB",
        slices=4 * UNIT,
        lending_limit=UNIT,
    )
    yield research, product
    for slug in ("research", "product"):
        kube.delete("Cohort", department_cohort(slug))


def in_department(world, kube, tenant, department):
    department_services.assign_team(actor=world.admin, tenant=tenant, department=department)
    reconcile_tenant(kube, tenant.pk)  # converges the cohorts first, then its queue
    return tenant


def test_a_team_borrows_its_sister_teams_idle_units_before_another_departments(
    kube, world, tenant_namespaces, h100_mig, departments
):
    research, product = departments
    t0 = time.monotonic()
    a = in_department(world, kube, team(world, kube, tenant_namespaces, h100_mig, 2), research)
    b = in_department(world, kube, team(world, kube, tenant_namespaces, h100_mig, 2), research)
    c = in_department(world, kube, team(world, kube, tenant_namespaces, h100_mig, 4), product)
    assert b and c  # B and C idle: they lend

    cohort = kube.get("Cohort", department_cohort("product"))
    assert cohort["spec"]["parentName"] == cohort_name()
    assert kube.get("ClusterQueue", a.namespace)["spec"]["cohortName"] == department_cohort(
        "research"
    )

    for i in range(7):
        queue_job(kube, a.namespace, f"a{i}")
    # A's own 2, B's idle 2 (all of them: research lends within itself without limit) and one
    # of product's 4 idle units (product lends one unit's slices to other departments)
    wait_for("A runs 5", lambda: workloads_by_state(kube, a.namespace)[0] == 5, timeout=30)
    deadline = time.monotonic() + 3  # and no more, though product still idles 3 units
    while time.monotonic() < deadline:
        assert workloads_by_state(kube, a.namespace)[0] == 5
        time.sleep(0.25)

    def borrowed():
        usage = (kube.get("ClusterQueue", a.namespace).get("status") or {}).get("flavorsUsage")
        for flavor in usage or []:
            for res in flavor["resources"]:
                if res["name"] == "gpu-portal.io/gpu-slices" and res.get("total") == str(5 * UNIT):
                    return res["borrowed"]
        return None

    assert wait_for("A's usage", borrowed, timeout=15) == str(3 * UNIT)

    # a department deleted: its Cohort goes with the next reconcile
    department_services.delete_department(actor=world.admin, department=product)
    reconcile_cohorts(kube)
    assert kube.get("Cohort", department_cohort("product")) is None
    assert kube.get("Cohort", department_cohort("research")) is not None
    print(f"departments on the cluster: {time.monotonic() - t0:.1f} s")
