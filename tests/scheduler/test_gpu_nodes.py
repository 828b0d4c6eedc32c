"""Real GPU nodes (issue 15): product labels overridable per model and used the same way by the
workloads, Kueue's flavors and the inventory; tolerations of the GPU taint checked at start-up
and rendered into every workload pod; the LimitRange's maxima and Kueue's ephemeral-storage
line from the same settings as the portal's checks."""

import pytest
from django.core import checks

from catalog import facts
from catalog.product_labels import configured_product_labels
from scheduler.cluster import node_offers, settings_checks
from scheduler.cluster.reconcile.specs import build_specs, flavor_specs
from scheduler.cluster.render.kueue import render_cluster_queue
from scheduler.cluster.render.namespace import render_limit_range, render_quotas
from scheduler.cluster.render.tenant import render_tenant
from scheduler.workloads.kinds.from_row import spec_for
from scheduler.workloads.kinds.manifests import render_workload
from scheduler.workloads.submit.spec import workload_spec
from tests.scheduler.test_render import by_key, spec, strip_hash

PCIE = "NVIDIA-H100-PCIe"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def gpu_node(labels):
    return {
        "metadata": {"name": "n1", "uid": "u1", "labels": labels},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


# --- product labels ---------------------------------------------------------------------------


def test_an_override_replaces_the_catalogs_product_both_ways():
    overrides = {"H100-80GB": PCIE}
    assert facts.product_label("h100-80gb", overrides) == PCIE
    assert facts.product_label("A100-80GB", overrides) == "NVIDIA-A100-SXM4-80GB"
    assert facts.model_for_product_label(PCIE, overrides).key == "H100-80GB"
    assert facts.model_for_product_label(f"{PCIE}-MIG-1g.10gb", overrides).key == "H100-80GB"
    # the catalog's own spelling no longer names the model: nodes say PCIe on this platform
    assert facts.model_for_product_label("NVIDIA-H100-80GB-HBM3", overrides) is None
    assert facts.model_for_product_label("NVIDIA-H100-80GB-HBM3").key == "H100-80GB"


def test_the_setting_takes_catalog_keys_or_slugs(settings):
    settings.GPU_PRODUCT_LABELS = {"h100-80gb": PCIE, "A100-80GB": "NVIDIA-A100-PCIE-80GB"}
    assert configured_product_labels() == {
        "H100-80GB": PCIE,
        "A100-80GB": "NVIDIA-A100-PCIE-80GB",
    }


def test_the_inventory_reads_nodes_by_product_with_the_setting(settings):
    settings.GPU_PRODUCT_LABELS = {"H100-80GB": PCIE}
    info = node_offers.parse_node(gpu_node({"nvidia.com/gpu.product": PCIE}))
    assert info.gpu_model == "H100-80GB" and info.units == {"h100-80gb": 8}
    # an explicit mapping wins over the setting (what the pure callers pass)
    assert node_offers.parse_node(gpu_node({"nvidia.com/gpu.product": PCIE}), {}).gpu_model == ""


def test_only_the_product_label_tells_the_model(settings):
    # Workloads and Kueue's flavors select nvidia.com/gpu.product: a node whose product names no
    # model never gets their pods, so its GPUs must not count as capacity, whatever else it says.
    pinned = {"nvidia.com/gpu.product": "Custom-Board", "gpu-portal/gpu-model": "H200-141GB"}
    info = node_offers.parse_node(gpu_node(pinned))
    assert (info.gpu_model, info.units) == ("", {})
    assert "gpu-portal/gpu-model" not in info.labels
    unpinned = {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert node_offers.parse_node(gpu_node(unpinned)).gpu_model == "H200-141GB"
    # the platform names such a board through the setting, and workloads then select it
    settings.GPU_PRODUCT_LABELS = {"H200-141GB": "Custom-Board"}
    assert node_offers.parse_node(gpu_node(pinned)).units == {"h200-141gb": 8}


def test_a_wrong_setting_entry_is_left_out_of_the_mapping(settings):
    settings.GPU_PRODUCT_LABELS = {
        "K80": "Tesla-K80",
        "H100-80GB": "NVIDIA H100",
        "A100-80GB": PCIE,
    }
    assert configured_product_labels() == {"A100-80GB": PCIE}


@pytest.mark.django_db
def test_flavors_and_workloads_select_the_overridden_product(settings, world):
    from scheduler.workloads import services as workloads
    from tenants.services import grants as grant_services

    settings.GPU_PRODUCT_LABELS = {"A100-80GB": "NVIDIA-A100-PCIE-80GB"}
    settings.GPU_NODE_TOLERATIONS = [GPU_TOLERATION]
    world.rc.gpu_model = "A100-80GB"
    world.rc.save()
    flavors = {f.name: f for f in flavor_specs([world.rc])}
    assert flavors["a100-80gb"].product_label == "NVIDIA-A100-PCIE-80GB"
    assert flavors["a100-80gb"].tolerations == (GPU_TOLERATION,)

    grant_services.grant_quota(
        actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=1
    )
    w = workloads.submit_workload(
        actor=world.member,
        tenant=world.tenant,
        spec=workload_spec(
            name="pcie",
            kind="job",
            image="pytorch/pytorch:2.4",
            resources={world.rc.slug: 1},
            priority="gpu-low",
        ),
    )
    pod = render_workload(spec_for(w))["spec"]["template"]["spec"]
    # the same label and value as the flavor's nodeLabels: Kueue finds no conflict to refuse
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-PCIE-80GB"}
    assert pod["tolerations"] == [GPU_TOLERATION]


@pytest.mark.parametrize(
    ("labels", "says"),
    [
        ([PCIE], "JSON object"),
        ({"K80": "Tesla-K80"}, "unknown GPU model 'K80'"),
        ({"H100-80GB": "NVIDIA H100"}, "is not a label value"),
        ({"H100-80GB": f"{PCIE}-MIG-1g.10gb"}, "without -MIG-"),
        ({"H100-80GB": "NVIDIA-H200"}, "H100-80GB and H200-141GB would both be 'NVIDIA-H200'"),
    ],
)
def test_a_bad_product_label_setting_stops_the_start(settings, labels, says):
    settings.GPU_PRODUCT_LABELS = labels
    errors = settings_checks.check_gpu_product_labels()
    assert [e.id for e in errors] and {e.id for e in errors} == {"scheduler.E003"}
    assert says in " ".join(e.msg for e in errors)


def test_the_default_settings_pass_every_check(settings):
    assert settings_checks.check_gpu_product_labels() == []
    assert settings_checks.check_gpu_node_tolerations() == []
    assert settings_checks.check_workload_maxima() == []


# --- tolerations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tolerations", "says"),
    [
        ({"key": "nvidia.com/gpu"}, "JSON list"),
        (["nvidia.com/gpu"], "a toleration is an object"),
        ([{"key": "nvidia.com/gpu", "operator": "In"}], "neither Exists nor Equal"),
        ([{"key": "nvidia com/gpu", "operator": "Exists"}], "is not a label key"),
        ([{"operator": "Equal", "value": "x"}], "without a key the operator must be Exists"),
        ([{"key": "a", "operator": "Exists", "value": "x"}], "with operator Exists there is no"),
        ([{"key": "a", "value": "bad value"}], "is not a label value"),
        ([{"key": "a", "operator": "Exists", "effect": "NoRun"}], "effect 'NoRun'"),
        ([{"key": "a", "operator": "Exists", "tolerationSeconds": 5}], "for NoExecute only"),
        ([{"key": "a", "operator": "Exists", "tolerate": True}], "unknown fields ['tolerate']"),
        ([GPU_TOLERATION] * 9, "at most 8 tolerations"),
    ],
)
def test_a_bad_toleration_stops_the_start(settings, tolerations, says):
    settings.GPU_NODE_TOLERATIONS = tolerations
    errors = settings_checks.check_gpu_node_tolerations()
    assert errors and all(e.id == "scheduler.E002" and e.level == checks.ERROR for e in errors)
    assert says in " ".join(e.msg for e in errors)


def test_good_tolerations_pass():
    assert (
        settings_checks.toleration_problems(
            [
                GPU_TOLERATION,
                {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"},
                {"operator": "Exists"},
                {
                    "key": "gpu",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 60,
                },
            ]
        )
        == []
    )


@pytest.mark.django_db
def test_every_workload_pod_tolerates_the_configured_taints(settings, world):
    from scheduler.workloads.models import Workload

    settings.GPU_NODE_TOLERATIONS = [GPU_TOLERATION, {"key": "dedicated", "operator": "Exists"}]
    w = Workload(
        pk=5,
        tenant=world.tenant,
        name="w",
        kind="deployment",
        image="vllm/vllm-openai:v0.6.3",
        resources={},
        gpu_model="H200-141GB",
        priority_class="gpu-low",
        namespace="ns",
        k8s_name="w-5",
    )
    pod = render_workload(spec_for(w))["spec"]["template"]["spec"]
    assert pod["tolerations"] == [GPU_TOLERATION, {"key": "dedicated", "operator": "Exists"}]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}


# --- the namespace agrees with the portal's checks ---------------------------------------------


def test_the_limit_range_caps_containers_at_the_workload_maxima():
    objs = by_key(render_tenant(spec(container_max={"memory": "256Gi", "cpu": "64"})))
    assert strip_hash(objs[("LimitRange", "gpu-portal-defaults")])["spec"] == {
        "limits": [
            {
                "type": "Container",
                "defaultRequest": {"cpu": "100m", "memory": "256Mi"},
                "default": {"cpu": "2", "memory": "4Gi"},
                "max": {"cpu": "64", "memory": "256Gi"},
            }
        ]
    }


@pytest.mark.django_db
def test_the_reconciler_renders_the_same_maxima_as_the_input_checks(settings, world):
    settings.WORKLOAD_MAX_CPU = "32"
    settings.WORKLOAD_MAX_MEMORY = "128Gi"
    settings.WORKLOAD_MAX_EPHEMERAL_STORAGE = "512Gi"
    settings.TENANT_EPHEMERAL_STORAGE_QUOTA = "2Ti"
    tenant_spec = build_specs([world.tenant])[world.tenant.pk]
    assert tenant_spec.container_max == {
        "cpu": "32",
        "memory": "128Gi",
        "ephemeral-storage": "512Gi",
    }
    # a max without a default limit: the limit defaults to it, the request to nothing
    (limits,) = render_limit_range(tenant_spec, "ns")["spec"]["limits"]
    assert limits["max"]["ephemeral-storage"] == limits["default"]["ephemeral-storage"] == "512Gi"
    assert limits["defaultRequest"]["ephemeral-storage"] == "0"
    quota = render_quotas(tenant_spec, "ns")[0]["spec"]["hard"]
    assert quota["requests.ephemeral-storage"] == "2Ti"
    cq = render_cluster_queue(tenant_spec, "ns")
    node_group = cq["spec"]["resourceGroups"][0]
    assert node_group["coveredResources"] == ["cpu", "memory", "ephemeral-storage"]
    assert node_group["flavors"][0]["resources"][2] == {
        "name": "ephemeral-storage",
        "nominalQuota": "2Ti",
        "borrowingLimit": "0",
        "lendingLimit": "0",
    }


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"WORKLOAD_MAX_CPU": "lots"}, "WORKLOAD_MAX_CPU 'lots'"),
        ({"WORKLOAD_MAX_MEMORY": "0"}, "must be above zero"),
        ({"WORKLOAD_MAX_CPU": "1"}, "below the namespaces' default cpu limit 2"),
        ({"WORKLOAD_MAX_MEMORY": "2Gi"}, "below the namespaces' default memory limit 4Gi"),
        ({"TENANT_EPHEMERAL_STORAGE_QUOTA": "-1Ti"}, "must not be negative"),
    ],
)
def test_bad_maxima_stop_the_start(settings, values, says):
    for name, value in values.items():
        setattr(settings, name, value)
    errors = settings_checks.check_workload_maxima()
    assert [e.id for e in errors] == ["scheduler.E004"]
    assert says in errors[0].msg
