"""A gang and an inference service on DRA (issue 53, item 3), on the real local cluster: the
same pod template names a one-device claim template per pod, Kueue admits the gang's pods
together in the driver's multiprocessors, and the scheduler cuts each pod its placement on the
one A100 (first fit: the gang's two 2g at slices 0 and 2, then the service's 1g at 4 and 5)."""

import pytest
from django.conf import settings

from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import pods as workload_pods
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.submit.spec import workload_spec
from tests.scheduler.cluster_helpers import unique_slug, wait_for
from tests.scheduler.test_dra_cluster import ONE_G, dra_a100, dra_classes
from tests.scheduler.test_kueue_cluster import team, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

__all__ = ["dra_a100", "dra_classes"]  # the fixtures, shared with test_dra_cluster.py
TWO_G = "a100-40gb-mig-2g.10gb"


def submit(kube, world, tenant, rc, name, **spec):
    w = workloads.submit_workload(
        actor=world.admin,
        tenant=tenant,
        spec=workload_spec(
            name=name,
            image="registry.k8s.io/pause:3.10",
            resources={rc.slug: 1},
            priority="gpu-low",
            **spec,
        ),
    )
    workload_sync.create_in_cluster(kube, w.pk)
    return w


def placed(kube, world, workload, pods):
    """The workload's pods, once `pods` of them run with their devices: (node, devices)."""

    def rows():
        workload.refresh_from_db()
        got = workload_pods.workload_pod_rows(kube, actor=world.admin, workload=workload)
        running = [r for r in got if r.state == "Running" and r.devices]
        return running if len(running) == pods else None

    return sorted((r.node, r.devices) for r in wait_for(f"{workload.name} placed", rows, 120))


def test_a_gang_and_a_service_get_their_placements_cut_on_one_dra_gpu(
    kube, kube_cluster, tenant_namespaces, world, dra_a100, dra_classes
):
    settings.PORTAL_INSTANCE = unique_slug("drak")  # a cohort of its own
    tenant = team(world, kube, tenant_namespaces, dra_classes[ONE_G], 7, prefix="drak")
    gang = submit(kube, world, tenant, dra_classes[TWO_G], "ddp", kind="job", pods=2)
    wait_state(kube, gang, "running", timeout=120)
    assert placed(kube, world, gang, 2) == [
        (dra_a100, "gpu-0: 2g.10gb at slice 0"),
        (dra_a100, "gpu-0: 2g.10gb at slice 2"),
    ]
    service = submit(
        kube, world, tenant, dra_classes[ONE_G], "serve", kind="deployment", replicas=2
    )
    wait_state(kube, service, "running", timeout=120)
    assert placed(kube, world, service, 2) == [
        (dra_a100, "gpu-0: 1g.5gb at slice 4"),
        (dra_a100, "gpu-0: 1g.5gb at slice 5"),
    ]
