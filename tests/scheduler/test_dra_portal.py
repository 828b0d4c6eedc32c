"""MIG on demand through DRA, wired into the portal (pure): a DRA model's grant as one queue line
of Kueue's multiprocessors, the namespace's templates and backstop, the pod's claims, the
members' verbs, and reading back which devices a pod got (inventory, metering, its page)."""

from decimal import Decimal

import pytest

from catalog import dra_quota, slices
from catalog.models import Pool, ResourceClass
from scheduler.cluster import node_offers
from scheduler.cluster.reconcile.specs import backstop_quota, dra_devices, queue_lines
from scheduler.cluster.render.access import role_rules
from scheduler.cluster.render.claims import render_claim_templates
from scheduler.cluster.render.namespace import render_quotas
from scheduler.cluster.render.specs import TenantSpec
from scheduler.workloads.kinds.pod_template import ManifestSpec, render_pod_template
from scheduler.workloads.lifecycle.pods import devices_in_words, pod_rows

MODEL = "A100-40GB"


def rc(pk, kind, profile="", fraction="1"):
    name = "nvidia.com/gpu" if kind == "whole" else f"nvidia.com/mig-{profile}"
    return ResourceClass(
        pk=pk,
        slug=f"a100-40gb-{kind}-{profile}",
        gpu_model=MODEL,
        kind=kind,
        profile=profile,
        resource_name=name,
        gpu_fraction=Decimal(fraction),
        memory_gb=5,
        active=True,
    )


WHOLE = rc(1, "whole")
ONE_G = rc(2, "mig", "1g.5gb", "0.1429")
THREE_G = rc(3, "mig", "3g.20gb", "0.4286")
CLASSES = {c.pk: c for c in (WHOLE, ONE_G, THREE_G)}


@pytest.fixture
def dra(settings):
    settings.GPU_DRA_MODELS = [MODEL]
    settings.GPU_QUOTA_UNIT = slices.UNIT_SLICES


def pools(limit=0):
    return {pk: Pool(resource_class_id=pk, borrowing_limit=limit, capacity=7) for pk in CLASSES}


def test_a_dra_models_grant_is_one_line_of_multiprocessors(dra):
    (line,) = queue_lines(CLASSES, pools(), {ONE_G.pk: 7}, unit=slices.UNIT_SLICES)
    assert (line.flavor, line.resource_name, line.nominal) == (
        "a100-40gb",
        dra_quota.QUOTA_RESOURCE,
        98,
    )
    # 4 slices of 1g and one 3g: 7 slices, 98 multiprocessors; a borrowing limit of 2 units on
    # every class is the widest of them, 2 whole GPUs: 14 slices, 196
    (line,) = queue_lines(CLASSES, pools(2), {ONE_G.pk: 4, THREE_G.pk: 1}, unit=slices.UNIT_SLICES)
    assert (line.nominal, line.borrowing_limit) == (98, 196)
    (line,) = queue_lines(CLASSES, pools(None), {WHOLE.pk: 2}, unit=slices.UNIT_SLICES)
    assert (line.nominal, line.borrowing_limit) == (196, None)


def test_without_dra_the_same_classes_stay_slices(settings):
    settings.GPU_DRA_MODELS = []
    (line,) = queue_lines(CLASSES, pools(), {ONE_G.pk: 7}, unit=slices.UNIT_SLICES)
    assert (line.resource_name, line.nominal) == (slices.SLICE_RESOURCE, 7)


def test_the_backstop_counts_claims_by_device_class(dra):
    lines = queue_lines(CLASSES, pools(), {ONE_G.pk: 7}, unit=slices.UNIT_SLICES)
    quota = backstop_quota(lines, CLASSES, {}, unit=slices.UNIT_SLICES)
    assert quota == {
        "mig.nvidia.com.deviceclass.resource.k8s.io/devices": 7,  # seven 1g at most
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": 1,
    }


def test_the_team_gets_a_one_device_template_per_profile_and_a_whole_gpu(dra):
    lines = queue_lines(CLASSES, pools(), {ONE_G.pk: 7}, unit=slices.UNIT_SLICES)
    devices = dra_devices(lines, CLASSES)
    assert (MODEL, "NVIDIA-A100-SXM4-40GB", "gpu") in devices
    assert (MODEL, "NVIDIA-A100-SXM4-40GB", "3g.20gb") in devices
    spec = TenantSpec(
        slug="t", name="T", active=True, gpu_quota={}, gpu_resource_names=(), dra_devices=devices
    )
    templates = {t["metadata"]["name"]: t for t in render_claim_templates(spec, "ns-t")}
    three = templates["dra-a100-40gb-mig-3g.20gb"]
    assert three["metadata"]["labels"]["gpu-portal.io/tenant"] == "t"
    (request,) = three["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "mig.nvidia.com"
    assert request["exactly"]["count"] == 1
    assert "'3g.20gb'" in request["exactly"]["selectors"][0]["cel"]["expression"]
    # no grant on the model: no templates; a suspended team: none either
    assert dra_devices(queue_lines(CLASSES, pools(), {}, unit=slices.UNIT_SLICES), CLASSES) == ()
    assert render_claim_templates(TenantSpec(**{**spec.__dict__, "active": False}), "ns-t") == []


def test_members_may_write_their_claims_and_templates():
    rules = role_rules(write=True, pod_exec=False)
    (dra_rule,) = [r for r in rules if r["apiGroups"] == ["resource.k8s.io"]]
    assert dra_rule["resources"] == ["resourceclaims", "resourceclaimtemplates"]
    assert "create" in dra_rule["verbs"]
    viewer = [
        r for r in role_rules(write=False, pod_exec=False) if r["apiGroups"] == ["resource.k8s.io"]
    ]
    assert "create" not in viewer[0]["verbs"]


def test_a_pod_asks_one_claim_per_device_in_place_of_extended_resources():
    spec = ManifestSpec(
        name="w", namespace="ns", tenant="t", workload_id=1, kind="job", image="i",
        gpu_model=MODEL, gpu_product="NVIDIA-A100-SXM4-40GB", priority_class="gpu-low",
        gpus={}, claims=(("dra-a100-40gb-mig-1g.5gb", 2),), cpu="1",
    )  # fmt: skip
    pod = render_pod_template(spec, "Never")["spec"]
    assert pod["resourceClaims"] == [
        {"name": "gpu-0", "resourceClaimTemplateName": "dra-a100-40gb-mig-1g.5gb"},
        {"name": "gpu-1", "resourceClaimTemplateName": "dra-a100-40gb-mig-1g.5gb"},
    ]
    (container,) = pod["containers"]
    assert container["resources"]["claims"] == [{"name": "gpu-0"}, {"name": "gpu-1"}]
    assert not any(k.startswith("nvidia.com/") for k in container["resources"]["requests"])
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}


CLAIM = {
    "metadata": {"namespace": "ns", "name": "w-abc-gpu-0-x"},
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": "gpu.nvidia.com",
                        "pool": "n",
                        "device": "gpu-0-mig-3g20gb-9-4",
                    }
                ]
            }
        }
    },
}
POD = {
    "metadata": {"namespace": "ns", "name": "w-abc", "uid": "u1"},
    "spec": {
        "nodeName": "n",
        "resourceClaims": [{"name": "gpu-0", "resourceClaimTemplateName": "t"}],
        "containers": [{}],
    },
    "status": {
        "phase": "Running",
        "resourceClaimStatuses": [{"name": "gpu-0", "resourceClaimName": "w-abc-gpu-0-x"}],
    },
}


def test_a_dra_pod_counts_its_allocated_devices_as_the_device_plugins_units():
    claims = node_offers.claim_devices(
        [CLAIM, {"metadata": {"namespace": "ns", "name": "pending"}}]
    )
    assert claims == {("ns", "w-abc-gpu-0-x"): ("gpu-0-mig-3g20gb-9-4",)}
    info = node_offers.parse_gpu_pod(POD, claims)
    assert info.resources == {"nvidia.com/mig-3g.20gb": 1}
    assert info.devices == ("gpu-0-mig-3g20gb-9-4",)
    assert node_offers.parse_gpu_pod(POD) is None  # claims unread: it holds nothing known
    assert node_offers.device_resource("gpu-3") == "nvidia.com/gpu"
    assert node_offers.device_resource("not-a-device") is None


def test_a_dra_node_offers_what_its_gpus_could_be_cut_into_and_what_is_free():
    units = node_offers.dra_units(MODEL, 2)
    assert units["a100-40gb"] == 2
    assert units["a100-40gb-mig-1g.5gb"] == 14
    assert units["a100-40gb-mig-4g.20gb"] == 2
    # one GPU holds a 4g and a 3g: 7 slices left on the other, one 4g of it
    free = node_offers.dra_free(
        MODEL, 2, {"nvidia.com/mig-4g.20gb": 1, "nvidia.com/mig-3g.20gb": 1}
    )
    assert free["a100-40gb-mig-4g.20gb"] == 1
    assert free["a100-40gb-mig-1g.5gb"] == 7
    assert free["a100-40gb"] == 1
    node = {
        "metadata": {
            "name": "n",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                "nvidia.com/gpu.count": "1",
            },
        },
        "status": {},
    }
    info = node_offers.parse_node(node, {MODEL: "NVIDIA-A100-SXM4-40GB"}, dra_models=[MODEL])
    assert info.mig_strategy == node_offers.DRA and info.units["a100-40gb-mig-3g.20gb"] == 2
    assert node_offers.parse_node(node, {MODEL: "NVIDIA-A100-SXM4-40GB"}).units == {}


def test_the_page_says_which_gpu_and_placement_each_pod_got():
    claims = node_offers.claim_devices([CLAIM])
    (row,) = pod_rows([POD], claims=claims)
    assert row.devices == "gpu-0: 3g.20gb at slice 4"
    assert devices_in_words(("gpu-1",)) == "gpu-1: whole GPU"


def test_the_namespace_quota_names_device_classes_as_kubernetes_counts_them():
    spec = TenantSpec(
        slug="t", name="T", active=True, gpu_resource_names=("nvidia.com/gpu",),
        gpu_quota={"mig.nvidia.com.deviceclass.resource.k8s.io/devices": 7, "nvidia.com/gpu": 1},
    )  # fmt: skip
    hard = render_quotas(spec, "ns-t")[0]["spec"]["hard"]
    assert hard["mig.nvidia.com.deviceclass.resource.k8s.io/devices"] == "7"
    assert hard["requests.nvidia.com/gpu"] == "1"


def test_a_dra_node_whose_slices_are_gone_offers_nothing_and_says_so():
    slices_ = [
        {"spec": {"driver": "gpu.nvidia.com", "nodeName": "n"}},
        {"spec": {"driver": "x", "nodeName": "m"}},
    ]
    assert node_offers.published_nodes(slices_) == {"n"}
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "1"}
    node = {"metadata": {"name": "m", "labels": labels}, "status": {}}
    info = node_offers.parse_node(
        node, {MODEL: "NVIDIA-A100-SXM4-40GB"}, dra_models=[MODEL], dra_published={"n"}
    )
    assert info.mig_strategy == node_offers.DRA_UNPUBLISHED and info.units == {}
