"""DRA faults on the real local cluster (issue 53, item 5): a driver that stops publishing and a
node that goes. The capacity map says when a DRA node publishes no devices; a node that goes
takes its slices with it, the cluster makes the job's pod again and it waits with the
scheduler's own words on its page, nothing lost in the portal; a new node's slices run it."""

import pytest
from django.conf import settings
from kubernetes import dynamic

from catalog import dra_devices
from localcluster import base as local_base
from localcluster import dra_node
from scheduler.cluster.inventory import sync_inventory
from scheduler.workloads.lifecycle import pods as workload_pods
from scheduler.workloads.models import Workload
from tests.scheduler.cluster_helpers import unique_slug, wait_for
from tests.scheduler.test_dra_cluster import MODEL, ONE_G, THREE_G, devices_of, dra_classes
from tests.scheduler.test_kueue_cluster import submit, team, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

__all__ = ["dra_classes"]  # the fixture, shared with test_dra_cluster.py


@pytest.fixture
def dra_nodes():
    """Names of DRA nodes the test makes; all gone (slices too) after it."""
    api = local_base.api_client()
    made: list[str] = []
    yield api, made
    for name in made:
        dra_node.remove(api, name)
    api.close()


def drop_slices(api, node: str) -> None:
    """The driver stops publishing: its ResourceSlices deleted, the node kept."""
    resource = dynamic.DynamicClient(api).resources.get(
        api_version=dra_devices.RESOURCE_API, kind="ResourceSlice"
    )
    for body in dra_node.slices_of(api, node):
        resource.delete(name=body["metadata"]["name"])


def pod_rows(kube, world, workload):
    workload.refresh_from_db()
    return workload_pods.workload_pod_rows(kube, actor=world.admin, workload=workload)


def test_a_dra_node_that_stops_publishing_or_goes_loses_no_work(
    kube, kube_cluster, tenant_namespaces, world, dra_classes, dra_nodes, client
):
    api, made = dra_nodes
    settings.PORTAL_INSTANCE = unique_slug("draf")  # a cohort of its own
    first = dra_node.ensure(api, MODEL, 1, unique_slug("dra-gone"))
    made.append(first)
    tenant = team(world, kube, tenant_namespaces, dra_classes[ONE_G], 7, prefix="draf")
    job = submit(kube, world, tenant, dra_classes[THREE_G], name="three")
    wait_state(kube, job, "running", timeout=90)
    assert devices_of(kube, tenant.namespace, job)[0] == first

    # the driver publishes nothing: the map says so, and offers none of its units
    drop_slices(api, first)
    sync_inventory(kube)
    client.force_login(world.admin)
    page = client.get("/console/capacity/").content.decode()
    assert first in page and "DRA: no devices published" in page

    # the node goes: its pod with it (the pod garbage collector), the Job makes another, which
    # waits for a device with the scheduler's reason; the workload is kept, not failed
    dra_node.remove(api, first)

    seen = []

    def waiting():
        # the scheduler's words, once it has tried: no node left offers the model
        seen[:] = pod_rows(kube, world, job)
        said = [r for r in seen if not r.node and r.state.startswith("Pending: Unschedulable: 0/")]
        return said if said and len(said) == len(seen) else None

    try:
        wait_for("the job's pod made again, waiting in the scheduler's words", waiting, 150)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}") from None
    job = Workload.objects.get(pk=job.pk)
    assert job.state not in Workload.FINAL_STATES, (job.state, job.message)

    # a node's slices come back (another node): the same workload runs there
    second = dra_node.ensure(api, MODEL, 1, unique_slug("dra-next"))
    made.append(second)
    wait_state(kube, job, "running", timeout=120)
    node, got = devices_of(kube, tenant.namespace, job)
    assert node == second and got and got[0].startswith("gpu-0-mig-3g20gb"), (node, got)
