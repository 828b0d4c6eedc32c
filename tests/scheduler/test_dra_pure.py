"""MIG on demand through DRA, the portal's side (pure): the quota counter and its rounding, the
Kueue v0.19 deviceClassMappings, the ResourceClaimTemplates a workload renders, and the 400s."""

import re

import pytest

from catalog import dra_devices as dd
from catalog import dra_quota as dra
from catalog import facts
from core.errors import InvalidInput

A100_PROFILES = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]


@pytest.mark.parametrize("key", ["A100-40GB", "A100-80GB"])
def test_on_an_a100_n_slices_admit_exactly_what_n_slices_hold(key):
    model = facts.get_model(key)
    assert dra.counter_units(key, dra.WHOLE_GPU) == 98
    for n in range(15):
        assert dra.slice_quota(key, n) == 14 * n
    for profile in model.profiles.values():
        units = dra.counter_units(key, profile.name)
        assert units == 14 * profile.compute_slices
        assert dra.slices_to_admit(key, profile.name) == profile.compute_slices
    # a 4g and a 3g on 7 slices; seven 1g on 7 slices, not an eighth
    seven = dra.slice_quota(key, 7)
    one_g = next(p.name for p in model.profiles.values() if p.memory_slices == 1)
    four_g = next(p.name for p in model.profiles.values() if p.name.startswith("4g"))
    three_g = next(p.name for p in model.profiles.values() if p.name.startswith("3g"))
    assert dra.counter_units(key, four_g) + dra.counter_units(key, three_g) == seven
    assert 7 * dra.counter_units(key, one_g) == seven < 8 * dra.counter_units(key, one_g)


@pytest.mark.parametrize("key", ["H100-80GB", "H200-141GB"])
def test_on_an_h100_or_h200_the_grant_rounds_up_as_a_whole(key):
    units = {p: dra.counter_units(key, p) for p in dd.dra_model(key).profiles}
    assert sorted(set(units.values())) == [16, 26, 32, 60, 64, 132]
    assert dra.counter_units(key) == 132  # the whole GPU
    assert [dra.slice_quota(key, n) for n in (0, 1, 2, 3, 4, 7, 14)] == [
        0,
        19,
        38,
        57,
        76,
        132,
        264,
    ]
    by_shape = {}  # "3g" -> 3g.40gb: per compute slices, the profile of fewest memory slices
    for p in sorted(facts.get_model(key).profiles.values(), key=lambda p: -p.memory_slices):
        if not p.media_extensions:
            by_shape[f"{p.compute_slices}g"] = p.name
    assert dra.slices_to_admit(key, by_shape["1g"]) == 1
    assert dra.slices_to_admit(key, by_shape["2g"]) == 2
    assert dra.slices_to_admit(key, by_shape["3g"]) == 4  # 60 > 57
    assert dra.slices_to_admit(key, by_shape["4g"]) == 4
    assert dra.slices_to_admit(key, by_shape["7g"]) == 7
    assert dra.slices_to_admit(key, dra.WHOLE_GPU, count=2) == 14
    two_memory_slice_1g = next(p for p, u in units.items() if u == 26)
    assert dra.slices_to_admit(key, two_memory_slice_1g) == 2
    # what one GPU can hold always fits the quota of its 7 slices; eight 1g do too (the over-
    # admission the docstring states), nine do not
    assert units[by_shape["4g"]] + units[by_shape["3g"]] <= dra.slice_quota(key, 7)
    assert 8 * units[by_shape["1g"]] <= dra.slice_quota(key, 7) < 9 * units[by_shape["1g"]]


def test_slice_quota_matches_the_counter_set_of_every_served_model():
    for model in dd.served_models():
        assert dra.slice_quota(model.key, model.compute_slices) == model.multiprocessors
        assert dra.slices_to_admit(model.key) == model.compute_slices


def test_device_class_mappings_for_kueue_v019():
    (mapping,) = dra.device_class_mappings()
    assert mapping["name"] == "gpu-portal.io/gpu-multiprocessors"
    assert mapping["deviceClassNames"] == ["mig.nvidia.com", "gpu.nvidia.com"]
    (source,) = mapping["sources"]
    counter = source["counter"]
    assert counter["name"] == "multiprocessors"
    assert counter["driver"] == "gpu.nvidia.com"
    cel = counter["deviceSelector"]["cel"]["expression"]
    labels = re.findall(r"== '([^']+)'", cel)
    assert labels == [m.product_label for m in dd.served_models()]
    assert "NVIDIA-A100-SXM4-80GB" in labels
    assert "NVIDIA-L40S" not in labels
    # Kueue: a counter name is a DNS label, a mapping name a label key
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", counter["name"])
    (only_a100,) = dra.device_class_mappings(
        ["A100-80GB"], overrides={"A100-80GB": "NVIDIA-A100-PCIE"}
    )
    assert only_a100["sources"][0]["counter"]["deviceSelector"]["cel"]["expression"] == (
        "device.attributes['gpu.nvidia.com'].productName.replace(' ', '-') == 'NVIDIA-A100-PCIE'"
    )


def test_a_mig_claim_template():
    template = dra.claim_template(
        "A100-80GB",
        "3g.40gb",
        namespace="team-a",
        labels={"app.kubernetes.io/managed-by": "gpu-portal"},
    )
    assert template == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": "dra-a100-80gb-mig-3g.40gb",
            "namespace": "team-a",
            "labels": {"app.kubernetes.io/managed-by": "gpu-portal"},
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "mig.nvidia.com",
                                "allocationMode": "ExactCount",
                                "count": 1,
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": "device.attributes['gpu.nvidia.com']"
                                            ".productName.replace(' ', '-') == "
                                            "'NVIDIA-A100-SXM4-80GB' && device.attributes"
                                            "['gpu.nvidia.com'].profile == '3g.40gb'"
                                        }
                                    }
                                ],
                            },
                        }
                    ]
                }
            }
        },
    }


def test_a_whole_gpu_claim_template_and_names():
    template = dra.claim_template("h100-80gb", count=2, namespace="team-b")
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert template["metadata"]["name"] == "dra-h100-80gb-gpu-x2"
    assert request["deviceClassName"] == "gpu.nvidia.com"
    assert request["count"] == 2
    assert "profile" not in request["selectors"][0]["cel"]["expression"]
    assert dra.claim_template_name("A100-80GB", "1g.10gb+me") == "dra-a100-80gb-mig-1g.10gb.me"
    assert dra.claim_template_name("A100-80GB", "1g.10gb") != dra.claim_template_name(
        "A100-40GB", "1g.10gb"
    )
    for model in dd.served_models():
        for profile in [dra.WHOLE_GPU, *model.profiles]:
            name = dra.claim_template_name(model.key, profile, 3)
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) and len(name) <= 63
    assert dra.pod_claim("dra-a100-80gb-gpu") == (
        {"name": "gpu", "resourceClaimTemplateName": "dra-a100-80gb-gpu"},
        {"name": "gpu"},
    )


def test_a_profile_the_model_does_not_have_is_a_400_naming_what_exists():
    with pytest.raises(InvalidInput) as err:
        dra.claim_template("A100-80GB", "3g.20gb", namespace="t")
    assert err.value.status == 400
    assert err.value.field == "profile"
    assert "A100-80GB has no MIG profile '3g.20gb'" in err.value.detail
    for profile in A100_PROFILES:
        assert profile in err.value.detail
    assert "'gpu' (a whole GPU)" in err.value.detail
    with pytest.raises(InvalidInput, match="has no MIG profile '5g.50gb'"):
        dra.counter_units("H100-80GB", "5g.50gb")


def test_models_dra_does_not_serve_are_400s_naming_those_it_does():
    served = "A30-24GB, A100-40GB, A100-80GB, H100-80GB, H200-141GB"
    with pytest.raises(InvalidInput) as err:
        dra.claim_template("L40S-48GB", namespace="t")
    assert "L40S-48GB is not MIG-capable" in err.value.detail
    assert served in err.value.detail
    assert err.value.field == "gpu_model"
    with pytest.raises(
        InvalidInput, match=f"unknown GPU model 'V100'; served through DRA: {served}"
    ):
        dra.slice_quota("V100", 7)
    with pytest.raises(InvalidInput, match="no multiprocessor count for B200-180GB 3g.90gb"):
        dra.counter_units("B200-180GB", "1g.23gb")


def test_shapes_no_gpu_or_node_of_the_model_could_hold_are_400s():
    with pytest.raises(InvalidInput) as err:
        dra.check_layout("A100-80GB", {"4g.40gb": 2})
    assert err.value.detail.startswith("2 × 4g.40gb cannot be held by one A100-80GB")
    assert "1 × 4g.40gb" in err.value.detail and "7 × 1g.10gb" in err.value.detail
    with pytest.raises(InvalidInput, match="1 × 1g.10gb \\+ 2 × 3g.40gb cannot be held"):
        dra.check_layout("A100-80GB", {"1g.10gb": 1, "3g.40gb": 2})
    assert dra.check_layout("A100-80GB", {"4g.40gb": 1, "3g.40gb": 1}).key == "A100-80GB"
    assert dra.check_layout("A100-80GB", {"1g.10gb": 7}).key == "A100-80GB"
    with pytest.raises(InvalidInput, match="has no MIG profile '8g.90gb'"):
        dra.check_layout("A100-80GB", {"8g.90gb": 1})
    with pytest.raises(InvalidInput) as err:
        dra.check_request("A100-80GB", "1g.10gb", 17, gpus_per_node=2)
    assert err.value.detail == (
        "17 × 1g.10gb (7 a GPU) cannot be held by one A100-80GB node: its nodes have at most "
        "2 GPUs, room for 14"
    )
    assert err.value.field == "count"
    assert dra.check_request("A100-80GB", "1g.10gb", 14, gpus_per_node=2).key == "A100-80GB"
    with pytest.raises(InvalidInput, match="3 whole GPUs cannot be held"):
        dra.check_request("H200-141GB", dra.WHOLE_GPU, 3, gpus_per_node=2)
    with pytest.raises(InvalidInput, match="count must be"):
        dra.check_request("A100-80GB", "1g.10gb", 0)
    with pytest.raises(InvalidInput, match="slices must be"):
        dra.slice_quota("A100-80GB", -1)
