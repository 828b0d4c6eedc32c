"""A cancel whose delete message was lost (Redis flushed, worker killed) still ends with nothing
on the cluster: the periodic pass deletes the Jobs of cancelled or unknown workloads."""

import pytest

from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.lifecycle.leftovers import delete_leftovers
from scheduler.workloads.models import Workload
from scheduler.workloads.submit.spec import workload_spec
from tenants.services.grants import grant_quota
from tests.scheduler.cluster_helpers import h100_h200_team, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


def test_the_job_of_a_workload_cancelled_without_its_delete_message_is_deleted(
    kube, tenant_namespaces, world
):
    tenant, mig, _ = h100_h200_team(world, kube, tenant_namespaces, "left", "Leftovers")
    grant_quota(actor=world.admin, tenant=tenant, resource_class=mig, amount=2)
    reconcile_tenant(kube, tenant.pk)
    tenant.refresh_from_db()

    def submit(name):
        w = workloads.submit_workload(
            actor=world.admin,
            tenant=tenant,
            spec=workload_spec(
                name=name,
                kind="job",
                image="registry.k8s.io/pause:3.10",
                resources={mig.slug: 1},
                priority="gpu-low",
            ),
        )
        return workload_sync.create_in_cluster(kube, w.pk)

    cancelled, kept, orphan = submit("cancelled"), submit("kept"), submit("orphan")
    names = {w.name: w.k8s_name for w in (cancelled, kept, orphan)}
    # cancelled in the database; the task that would delete its Job never runs
    workloads.cancel_workload(actor=world.admin, workload=cancelled)
    # a row gone altogether (its tenant's data cleaned up by hand)
    Workload.objects.filter(pk=orphan.pk).delete()

    ns = tenant.namespace
    # (other tests' left-overs in this instance's namespaces may go too: only ours are asserted)
    deleted = [d for d in delete_leftovers(kube) if d.startswith(f"Job/{ns}/")]

    assert sorted(deleted) == [f"Job/{ns}/{names['cancelled']}", f"Job/{ns}/{names['orphan']}"]
    wait_for("the cancelled job gone", lambda: kube.get("Job", names["cancelled"], ns) is None)
    assert kube.get("Job", names["kept"], ns) is not None
    # a second pass finds nothing more of ours (objects being deleted are not counted again)
    assert not [d for d in delete_leftovers(kube) if d.startswith(f"Job/{ns}/")]
