"""Grants in GPU-equivalent slices, on the real local cluster: one 7-slice grant of a model
serves a 4g and a 3g workload, or a whole GPU, as Kueue's transformations count them; a member
with kubectl can spend no more than the grant in any unit."""

import pytest
from django.conf import settings

from catalog import slices
from catalog.models import ResourceClass
from catalog.services import ensure_resource_classes, set_pool
from localcluster import fleet
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import sync as workload_sync
from tests.scheduler.cluster_helpers import as_user, unique_slug, wait_for
from tests.scheduler.test_kueue_cluster import member_job, submit, team, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

A100 = "NVIDIA-A100-SXM4-80GB"


@pytest.fixture
def split_a100(kube_admin):
    """A node of its own with one A100 split 4g.40gb + 3g.40gb (no seed node has a 4g)."""
    name = unique_slug("a100-split")
    spec = {
        "name": name,
        "model": "A100-80GB",
        "gpus": 1,
        "migConfig": "4g.40gb-3g.40gb",
        "devicePluginConfig": "default",
    }
    kube_admin.create(fleet.node_manifest(spec))

    def ready():
        node = kube_admin.get("Node", name) or {}
        conditions = (node.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    wait_for(f"node {name} ready", ready, timeout=60)
    yield name
    kube_admin.delete("Node", name)


@pytest.fixture
def a100_classes(world):
    ensure_resource_classes(["A100-80GB"])
    classes = {rc.slug: rc for rc in ResourceClass.objects.filter(gpu_model="A100-80GB")}
    set_pool(actor=world.admin, resource_class=classes["a100-80gb-mig-1g.10gb"], capacity=7)
    return classes


def kueue_held(kube, ns, job):
    """Kueue's reason a member's Job waits, or None while it has quota."""
    uid = job["metadata"]["uid"]
    for w in kube.list("KueueWorkload", ns, label_selector=f"kueue.x-k8s.io/job-uid={uid}"):
        for c in (w.get("status") or {}).get("conditions") or []:
            if c["type"] == "QuotaReserved" and c["status"] == "False":
                return c["message"]
    return None


def kueue_admitted(kube, ns, job):
    uid = job["metadata"]["uid"]
    for w in kube.list("KueueWorkload", ns, label_selector=f"kueue.x-k8s.io/job-uid={uid}"):
        for c in (w.get("status") or {}).get("conditions") or []:
            if c["type"] == "Admitted" and c["status"] == "True":
                return True
    return False


def test_seven_1g_slices_run_a_4g_and_a_3g_or_a_whole_gpu_and_no_more(
    kube, kube_cluster, tenant_namespaces, world, split_a100, a100_classes
):
    assert settings.GPU_QUOTA_UNIT == slices.UNIT_SLICES
    # a cohort of its own: nothing to borrow, so the grant is all the team may use
    settings.PORTAL_INSTANCE = unique_slug("slices")
    one_g = a100_classes["a100-80gb-mig-1g.10gb"]
    tenant = team(world, kube, tenant_namespaces, one_g, 7, prefix="sl")
    cq = kube.get("ClusterQueue", tenant.namespace)
    gpus = cq["spec"]["resourceGroups"][1]
    assert gpus["coveredResources"] == [slices.SLICE_RESOURCE]
    (a100,) = [f for f in gpus["flavors"] if f["name"] == "a100-80gb"]
    assert a100["resources"][0]["nominalQuota"] == "7"

    # the grant was 7 x 1g; the same 7 slices serve a 4g and a 3g at once
    four = submit(kube, world, tenant, a100_classes["a100-80gb-mig-4g.40gb"], name="four")
    three = submit(kube, world, tenant, a100_classes["a100-80gb-mig-3g.40gb"], name="three")
    wait_state(kube, four, "running")
    wait_state(kube, three, "running")
    pod = kube.list("Pod", tenant.namespace, label_selector=f"job-name={four.k8s_name}")[0]
    assert pod["spec"]["nodeName"] == split_a100  # the only 4g.40gb there is

    # a whole GPU draws on the same slices: it waits until both are done
    whole = submit(kube, world, tenant, a100_classes["a100-80gb"], name="whole")
    wait_state(kube, whole, "queued", reason="WaitingForQuota")
    for w in (four, three):
        workloads.cancel_workload(actor=world.admin, workload=w)
        workload_sync.delete_from_cluster(kube, w.pk)
    wait_state(kube, whole, "running", timeout=90)

    # with kubectl, the member's own Jobs are held in every unit while the grant is spent
    ns = tenant.namespace
    member = as_user(kube_cluster, world.member.username)
    pinned = {"nvidia.com/gpu.product": A100}
    small = member_job("small", {"nvidia.com/mig-1g.10gb": 1}, node_selector=pinned)
    big = member_job("big", {"nvidia.com/gpu": 2}, node_selector=pinned)
    created = {}
    for job in (small, big):
        job["metadata"]["namespace"] = ns
        created[job["metadata"]["name"]] = member.create(job)
    for name, job in created.items():
        message = wait_for(f"{name} held by Kueue", lambda j=job: kueue_held(kube, ns, j))
        assert slices.SLICE_RESOURCE in message, message
    # the whole GPU done, the 1g fits the 7 slices; 2 GPUs (14) never do
    workloads.cancel_workload(actor=world.admin, workload=whole)
    workload_sync.delete_from_cluster(kube, whole.pk)
    wait_for("the member's 1g admitted", lambda: kueue_admitted(kube, ns, created["small"]))
    assert not kueue_admitted(kube, ns, created["big"])
    assert kube.get("Job", "big", ns)["spec"]["suspend"] is True
    # and the namespace's backstop quota allows no more than 7 slices in any unit either
    quota = kube.get("ResourceQuota", "gpu-portal-quota", ns) or {}
    hard = (quota.get("spec") or {}).get("hard") or {}
    assert hard.get("requests.nvidia.com/gpu") == "1"
    assert hard.get("requests.nvidia.com/mig-3g.40gb") == "2"
    assert hard.get("requests.nvidia.com/mig-1g.10gb") == "7"
