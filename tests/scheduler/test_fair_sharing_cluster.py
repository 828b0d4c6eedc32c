"""Kueue's fair sharing and a deep queue, on the real local cluster: idle capacity goes to the
team with the lowest share (it may take back what a richer team borrowed), and a few hundred
queued workloads across teams do not keep what fits from being admitted."""

import time

import pytest

from catalog.services import set_pool
from tests.scheduler.cluster_helpers import unique_slug, wait_for
from tests.scheduler.test_kueue_cluster import MIG, h100_mig, member_job, team

__all__ = ["h100_mig"]  # the fixture, shared with test_kueue_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


@pytest.fixture
def lending_pool(world, h100_mig, settings):
    """The product's defaults: idle units lent, borrowing without a limit; Kueue's own
    preemption at once (no portal grace), in a cohort of this test's own."""
    settings.PORTAL_INSTANCE = unique_slug("fair")
    set_pool(actor=world.admin, resource_class=h100_mig, borrowing_limit=None, reclaim_grace_s=0)
    return h100_mig


def queue_job(kube, namespace, name):
    job = member_job(name, {MIG: 1})
    job["metadata"].update(namespace=namespace, labels={"kueue.x-k8s.io/queue-name": "default"})
    job["spec"]["template"]["spec"]["priorityClassName"] = "gpu-low"
    return kube.create(job)


def workloads_by_state(kube, namespace):
    """(admitted, preempted-by-fair-sharing) Kueue workloads of a namespace."""
    admitted, fair = 0, 0
    for w in kube.list("KueueWorkload", namespace):
        conditions = {c["type"]: c for c in (w.get("status") or {}).get("conditions") or []}
        admitted += conditions.get("Admitted", {}).get("status") == "True"
        preempted = conditions.get("Preempted", {})
        fair += preempted.get("reason") == "InCohortFairSharing"
    return admitted, fair


def test_a_starved_team_takes_idle_capacity_back_from_a_richer_borrower(
    kube, world, tenant_namespaces, lending_pool
):
    lender = team(world, kube, tenant_namespaces, lending_pool, 8, prefix="idle")
    rich = team(world, kube, tenant_namespaces, lending_pool, 2, prefix="rich")
    poor = team(world, kube, tenant_namespaces, lending_pool, 2, prefix="poor")
    assert lender  # lends its 8 idle units and never submits
    # the poor team first: its 2 own units and 1 borrowed
    for i in range(3):
        queue_job(kube, poor.namespace, f"p{i}")
    wait_for("poor runs 3", lambda: workloads_by_state(kube, poor.namespace)[0] == 3)
    # the rich team borrows the other 7 idle units and queues more
    for i in range(12):
        queue_job(kube, rich.namespace, f"r{i}")
    wait_for("rich runs 9", lambda: workloads_by_state(kube, rich.namespace)[0] == 9)
    # the poor team wants 2 more: its share (1 borrowed) is below the rich team's (7), so
    # Kueue's fair sharing preempts the rich team's borrowed work for it (classic preemption
    # never preempts to lend a borrower more)
    for i in range(3, 5):
        queue_job(kube, poor.namespace, f"p{i}")
    wait_for("poor runs 5", lambda: workloads_by_state(kube, poor.namespace)[0] == 5, timeout=60)
    admitted, fair = workloads_by_state(kube, rich.namespace)
    assert (admitted, fair) == (7, 2)


def test_what_fits_is_admitted_with_three_hundred_workloads_queued_across_teams(
    kube, world, tenant_namespaces, lending_pool
):
    teams = [
        team(world, kube, tenant_namespaces, lending_pool, 4, prefix=f"deep{i}") for i in range(4)
    ]
    t0 = time.monotonic()
    for i in range(75):
        for t in teams:  # interleaved, as teams submit
            queue_job(kube, t.namespace, f"q{i}")
    created = time.monotonic() - t0

    def admitted():
        counts = [workloads_by_state(kube, t.namespace)[0] for t in teams]
        return counts if sum(counts) >= 16 else None

    counts = wait_for("16 of 300 admitted", admitted, timeout=120)
    print(f"300 queued in {created:.1f} s; what fits admitted {time.monotonic() - t0:.1f} s after")
    # the 16 units of the cohort, and no more: each team its own 4 (nothing idle to borrow)
    assert counts == [4, 4, 4, 4]
    deadline = time.monotonic() + 2  # and stays so: a deep queue never over-admits
    while time.monotonic() < deadline:
        assert [workloads_by_state(kube, t.namespace)[0] for t in teams] == [4, 4, 4, 4]
        time.sleep(0.25)
