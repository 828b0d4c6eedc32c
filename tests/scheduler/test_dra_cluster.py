"""MIG on demand through DRA, on the real local cluster: a KWOK node publishes one A100-40GB the
way NVIDIA's DRA driver with DynamicMIG does (localcluster/dra_node.py), the real kube-scheduler
allocates each pod's claims within the GPU's counters, and Kueue v0.19 charges them on the
driver's `multiprocessors` counter against the team's grant. Nothing is drained, no layout is
rolled out: the same GPU holds a 4g and a 3g, then seven 1g.

The scheduler places a claim on the first device that fits (devices sorted by name, so the
lowest placement start first). On an A100 a 4g has one placement (start 0) and a 3g two (0 and
4): the 4g is submitted first and is running before the 3g is submitted, or a 3g at 0 would
leave the 4g nowhere to go. The test states that order rather than hoping for it."""

import pytest
from django.conf import settings

from catalog import dra_quota
from catalog.models import ResourceClass
from catalog.services import ensure_resource_classes, set_pool
from localcluster import base as local_base
from localcluster import dra_node
from scheduler.cluster import node_offers
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import pods as workload_pods
from scheduler.workloads.lifecycle import sync as workload_sync
from tests.scheduler.cluster_helpers import as_user, unique_slug, wait_for
from tests.scheduler.test_kueue_cluster import member_job, submit, team, wait_state
from tests.scheduler.test_slices_cluster import kueue_admitted, kueue_held

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

MODEL = "A100-40GB"
ONE_G, THREE_G, FOUR_G = "a100-40gb-mig-1g.5gb", "a100-40gb-mig-3g.20gb", "a100-40gb-mig-4g.20gb"


@pytest.fixture
def dra_a100():
    """A node of its own with one A100-40GB served through DRA; gone (slices too) after."""
    assert MODEL in settings.GPU_DRA_MODELS
    api = local_base.api_client()
    name = dra_node.ensure(api, MODEL, 1, unique_slug("dra-a100"))
    try:
        yield name
    finally:
        dra_node.remove(api, name)
        api.close()


@pytest.fixture
def dra_classes(world):
    ensure_resource_classes([MODEL])
    classes = {rc.slug: rc for rc in ResourceClass.objects.filter(gpu_model=MODEL)}
    # what the inventory would set for one GPU cut on demand (node_offers.dra_units)
    for slug, units in node_offers.dra_units(MODEL, 1).items():
        set_pool(actor=world.admin, resource_class=classes[slug], capacity=units)
    return classes


def devices_of(kube, namespace, workload):
    """The driver's devices the workload's pod was allocated (claims read as the page reads
    them), and the node it runs on."""
    pods = kube.list("Pod", namespace, label_selector=f"job-name={workload.k8s_name}")
    claims = node_offers.claim_devices(kube.list("ResourceClaim", namespace))
    out = []
    for pod in pods:
        for name in node_offers.pod_claim_names(pod):
            out += claims.get((namespace, name), ())
    return pods[0]["spec"].get("nodeName") if pods else None, out


def stop(kube, world, *done):
    for w in done:
        workloads.cancel_workload(actor=world.admin, workload=w)
        workload_sync.delete_from_cluster(kube, w.pk)


def test_seven_dra_slices_cut_a_4g_and_a_3g_then_seven_1g_on_one_gpu_with_no_drain(
    kube, kube_cluster, tenant_namespaces, world, dra_a100, dra_classes
):
    settings.PORTAL_INSTANCE = unique_slug("dra")  # a cohort of its own: nothing to borrow
    tenant = team(world, kube, tenant_namespaces, dra_classes[ONE_G], 7, prefix="dra")
    ns = tenant.namespace

    # the grant of 7 slices is Kueue quota on the driver's multiprocessors: 7 x 14 on an A100
    cq = kube.get("ClusterQueue", ns)
    (gpus,) = [
        g for g in cq["spec"]["resourceGroups"] if dra_quota.QUOTA_RESOURCE in g["coveredResources"]
    ]
    (a100,) = [f for f in gpus["flavors"] if f["name"] == "a100-40gb"]
    line = a100["resources"][0]
    assert (line["name"], line["nominalQuota"]) == (dra_quota.QUOTA_RESOURCE, "98")
    # the team's templates, one device each, as members name them from kubectl too
    templates = {t["metadata"]["name"] for t in kube.list("ResourceClaimTemplate", ns)}
    assert {
        "dra-a100-40gb-mig-1g.5gb",
        "dra-a100-40gb-mig-3g.20gb",
        "dra-a100-40gb-mig-4g.20gb",
        "dra-a100-40gb-gpu",
    } <= templates

    # a 4g first (its only placement starts at 0), then a 3g: together the whole GPU
    four = submit(kube, world, tenant, dra_classes[FOUR_G], name="four")
    wait_state(kube, four, "running", timeout=90)
    three = submit(kube, world, tenant, dra_classes[THREE_G], name="three")
    wait_state(kube, three, "running", timeout=90)
    node, got = devices_of(kube, ns, four)
    assert node == dra_a100 and got == ["gpu-0-mig-4g20gb-5-0"]
    node, got = devices_of(kube, ns, three)
    assert node == dra_a100 and got == ["gpu-0-mig-3g20gb-9-4"]
    # the page says which GPU and placement each pod got
    three.refresh_from_db()
    (row,) = workload_pods.workload_pod_rows(kube, actor=world.admin, workload=three)
    assert row.devices == "gpu-0: 3g.20gb at slice 4"

    # a whole GPU is the same 7 slices: Kueue holds it while both run
    whole = submit(kube, world, tenant, dra_classes["a100-40gb"], name="whole")
    wait_state(kube, whole, "queued", reason="WaitingForQuota")
    stop(kube, world, four, three, whole)

    # the same GPU, cut again, with no drain and no layout: seven 1g
    ones = [submit(kube, world, tenant, dra_classes[ONE_G], name=f"one-{i}") for i in range(7)]
    for w in ones:
        wait_state(kube, w, "running", timeout=120)
    placed = sorted(d for w in ones for d in devices_of(kube, ns, w)[1])
    assert placed == [f"gpu-0-mig-1g5gb-19-{start}" for start in range(7)]

    # a member's own claim from kubectl, beyond the grant: Kueue holds it in multiprocessors
    member = as_user(kube_cluster, world.member.username)
    job = member_job(
        "eighth", {}, node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
    )
    pod = job["spec"]["template"]["spec"]
    pod["resourceClaims"] = [
        {"name": "gpu", "resourceClaimTemplateName": "dra-a100-40gb-mig-1g.5gb"}
    ]
    pod["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    job["metadata"]["namespace"] = ns
    created = member.create(job)
    message = wait_for("the member's claim held by Kueue", lambda: kueue_held(kube, ns, created))
    assert dra_quota.QUOTA_RESOURCE in message, message
    assert not kueue_admitted(kube, ns, created)

    # nothing was drained: the node stayed schedulable, no MIG manager label was ever set
    labels = kube.get("Node", dra_a100)["metadata"]["labels"]
    assert not kube.get("Node", dra_a100)["spec"].get("unschedulable")
    assert "nvidia.com/mig.config" not in labels
    stop(kube, world, *ones)
    wait_for(
        "the member's claim admitted once the slices are free",
        lambda: kueue_admitted(kube, ns, created),
        timeout=90,
    )
