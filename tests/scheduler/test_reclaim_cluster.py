"""Reclaim with a grace on the real local cluster: a lender gets its idle units back from a
borrower only once the borrower has run its pool's `reclaim_grace_s`, by the portal's controller
(Kueue's own reclaim is off: `reclaimWithinCohort: Never`), and the borrower's page says why."""

import time

import pytest
from django.urls import reverse
from django.utils.dateparse import parse_datetime

from catalog.services import set_pool
from scheduler.workloads.models import Workload, WorkloadEvent
from scheduler.workloads.queue.reclaim import RECLAIMED_FOR, reclaim_borrowed_units
from tenants.models import AuditEvent, NotificationDelivery
from tenants.services.tenants import add_member
from tests.scheduler.cluster_helpers import unique_slug, wait_for
from tests.scheduler.test_kueue_cluster import h100_mig, submit, team, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]
__all__ = ["h100_mig"]  # the fixture, shared with test_kueue_cluster

GRACE_S = 20  # long enough to look before it ends, short enough for a test


def kueue_workload(kube, workload):
    (kw,) = [
        w
        for w in kube.list("KueueWorkload", workload.namespace)
        if (w["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid") == workload.k8s_uid
    ]
    return kw


def admitted_at(kw):
    cond = next(c for c in kw["status"]["conditions"] if c["type"] == "Admitted")
    return parse_datetime(cond["lastTransitionTime"]).timestamp()


def test_the_lender_gets_its_units_back_only_after_the_borrowers_grace(
    kube, tenant_namespaces, world, h100_mig, settings, client
):
    # a cohort of its own: queues other tests leave behind (or still deleting) would lend too
    settings.PORTAL_INSTANCE = unique_slug("reclaim")
    set_pool(actor=world.admin, resource_class=h100_mig, borrowing_limit=4, reclaim_grace_s=GRACE_S)
    lender = team(world, kube, tenant_namespaces, h100_mig, 4, prefix="lend")
    borrower = team(world, kube, tenant_namespaces, h100_mig, 0, prefix="borrow")
    world.owner.email = "owner@example.com"
    world.owner.save()
    add_member(actor=world.admin, tenant=borrower, username=world.owner.username, role="owner")
    # Kueue never reclaims the lender's units by itself: the portal does (the borrower lends
    # nothing, so Kueue's own policy stays)
    preemption = kube.get("ClusterQueue", lender.namespace)["spec"]["preemption"]
    assert preemption["reclaimWithinCohort"] == "Never"
    assert preemption["withinClusterQueue"] == "LowerPriority"
    preemption = kube.get("ClusterQueue", borrower.namespace)["spec"]["preemption"]
    assert preemption["reclaimWithinCohort"] == "Any"

    # the borrower has no grant but may borrow: its job runs on the lender's idle units
    borrowed = submit(kube, world, borrower, h100_mig, units=3, name="borrowed")
    borrowed = wait_state(kube, borrowed, "running")
    grace_ends = admitted_at(kueue_workload(kube, borrowed)) + GRACE_S

    # the lender needs them back: Kueue does not preempt, its job waits for the cohort's units
    own = submit(kube, world, lender, h100_mig, units=4, name="own")

    def lender_waits_for_the_cohort():
        w = wait_state(kube, own, "queued")
        return "cohort" in w.message or "insufficient" in w.message

    wait_for("the lender's job held for want of units", lender_waits_for_the_cohort, timeout=30)
    looked = 0
    while time.time() < grace_ends - 3:  # within the grace: the controller spares it
        assert reclaim_borrowed_units(kube) == []
        looked += 1
        time.sleep(1)
    assert looked, f"set-up took longer than the {GRACE_S} s grace; nothing was checked"
    assert wait_state(kube, borrowed, "running").state == "running"
    assert Workload.objects.get(pk=own.pk).state == "queued"

    # once the grace is over, the controller evicts it through Kueue
    key = f"{borrowed.namespace}/{kueue_workload(kube, borrowed)['metadata']['name']}"
    evicted = wait_for("the controller's reclaim", lambda: reclaim_borrowed_units(kube), 30)
    assert evicted == [key]
    assert time.time() >= grace_ends
    kw = kueue_workload(kube, borrowed)
    assert kw["spec"]["active"] is False
    assert kw["metadata"]["annotations"][RECLAIMED_FOR] == lender.slug
    assert reclaim_borrowed_units(kube) == []  # idempotent: on its way out, chosen once

    # Kueue suspends the borrower's job and admits the lender's
    wait_state(kube, own, "running", timeout=90)
    job = kube.get("Job", borrowed.k8s_name, borrowed.namespace)
    assert job["spec"]["suspend"] is True  # requeued, not lost

    # the next pass puts the evicted workload back in its queue, behind the lender's
    def requeued():
        reclaim_borrowed_units(kube)
        kw = kueue_workload(kube, borrowed)
        return kw["spec"].get("active", True) and RECLAIMED_FOR not in (
            kw["metadata"].get("annotations") or {}
        )

    wait_for("the evicted workload requeued", requeued, timeout=30)
    borrowed = wait_state(kube, borrowed, "queued")
    assert wait_state(kube, own, "running").state == "running"  # it stays the lender's

    # its page says what happened, and why it was chosen
    events = list(WorkloadEvent.objects.filter(workload=borrowed))
    reclaimed = next(e for e in events if e.reason == "Reclaimed")
    assert reclaimed.state == "preempted"
    assert reclaimed.message.startswith(
        f"Given back to team {lender.slug} after the {GRACE_S} s grace: it ran "
    )
    assert "on borrowed H100-80GB" in reclaimed.message
    assert "chosen as the least work lost" in reclaimed.message
    states = [e.state for e in events if e.state]
    assert states[-3:] == ["running", "preempted", "queued"]
    client.force_login(world.admin)
    page = client.get(reverse("scheduler:workload_detail", args=[borrowed.pk]))
    assert reclaimed.message in page.content.decode()
    # audited, and the borrower's owners told
    audit = AuditEvent.objects.get(verb="workload.reclaimed", object_id=str(borrowed.pk))
    assert audit.tenant == borrower and audit.after["lender"] == lender.slug
    requeue = AuditEvent.objects.get(verb="workload.reclaim_requeued", object_id=str(borrowed.pk))
    assert requeue.after == {"active": True}
    (mail,) = NotificationDelivery.objects.filter(event="workload.reclaimed")
    assert mail.tenant == borrower and "owner@example.com" in mail.recipients
