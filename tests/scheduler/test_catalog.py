"""The catalog against the facts file: every MIG profile, and NVIDIA's placement rules."""

import json
from collections import Counter
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import facts
from catalog.services import catalog_resource_classes

RAW = json.loads(facts.CATALOG_PATH.read_text())
CLASSIC = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
A100 = facts.get_model("A100-80GB")


@pytest.mark.parametrize(
    ("model_key", "profile"),
    [(g["model"], p["name"]) for g in RAW["gpus"] for p in g["profiles"]],
)
def test_every_profile_of_the_facts_file_is_in_the_catalog(model_key, profile):
    raw = next(
        p
        for g in RAW["gpus"]
        if g["model"] == model_key
        for p in g["profiles"]
        if p["name"] == profile
    )
    got = facts.get_model(model_key).profile(profile)
    assert got.compute_slices == raw["compute_slices"]
    assert got.memory_slices == raw["memory_slices"]
    assert got.max_instances == raw["max_instances"]
    assert list(got.placement_starts) == raw["placement_starts"]
    assert got.resource_name == raw["k8s_mixed_resource"]
    # a single instance of any profile fits an empty GPU
    assert facts.can_pack(model_key, {profile: 1})


def test_non_mig_models_are_whole_or_shared_only():
    for key in ("L40S-48GB", "RTX4090-24GB"):
        model = facts.get_model(key)
        assert not model.mig_capable and model.profiles == {}
        assert facts.can_pack(model, {})
        with pytest.raises(facts.UnknownProfile):
            facts.can_pack(model, {"1g.10gb": 1})


@pytest.mark.parametrize(
    ("devices", "fits"),
    [
        ({"4g.40gb": 1, "3g.40gb": 1}, True),
        ({"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}, True),
        ({"4g.40gb": 2}, False),
        ({"3g.40gb": 2, "1g.10gb": 1}, False),  # compute 7 fits, memory slices do not
        ({"3g.40gb": 1, "1g.10gb": 4}, True),  # only as 1g at 0-3 and 3g at 4
        ({"1g.10gb": 7}, True),
        ({"1g.10gb": 8}, False),
        ({"7g.80gb": 1, "1g.10gb": 1}, False),
        ({"1g.10gb+me": 2}, False),  # max one instance with media extensions
        ({"1g.20gb": 4}, True),
        ({"1g.20gb": 4, "1g.10gb": 1}, False),
    ],
)
def test_placement_rules_of_the_facts_file(devices, fits):
    assert facts.can_pack(A100, devices) is fits


def test_3g_plus_four_1g_packs_only_with_3g_at_slice_4():
    placement = facts.find_placement(A100, {"3g.40gb": 1, "1g.10gb": 4})
    assert ("3g.40gb", 4) in placement
    assert sorted(s for n, s in placement if n == "1g.10gb") == [0, 1, 2, 3]


def test_enumeration_matches_nvidia_counts():
    # gpu-facts.md section 1: 37 packable multisets, 19 maximal physical layouts (NVIDIA's
    # figure), 14 distinct multisets among them; 77 packable multisets with 1g.20gb added.
    non_empty = facts.packable_multisets(A100, CLASSIC) - {()}
    assert len(non_empty) == 37
    maximal = facts.maximal_placements(A100, CLASSIC)
    assert len(maximal) == 19
    assert len({facts.as_multiset(p) for p in maximal}) == 14
    assert len(facts.packable_multisets(A100, [*CLASSIC, "1g.20gb"]) - {()}) == 77


def test_every_8_slice_model_has_the_same_geometry_as_the_a100():
    reference = len(facts.all_placements(A100))
    for model in facts.load_catalog().values():
        if model.mig_capable and model.memory_slices == 8:
            assert len(facts.all_placements(model)) == reference, model.key


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(CLASSIC), st.integers(0, 7), max_size=5))
def test_can_pack_agrees_with_the_enumeration(devices):
    wanted = tuple(sorted((k, v) for k, v in devices.items() if v))
    assert facts.can_pack(A100, devices) == (wanted in facts.packable_multisets(A100, CLASSIC))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(list(A100.profiles)), st.integers(0, 7), max_size=7))
def test_a_found_placement_obeys_every_rule(devices):
    placement = facts.find_placement(A100, devices)
    if placement is None:
        return
    used: list[int] = []
    compute = 0
    for name, start in placement:
        profile = A100.profile(name)
        assert start in profile.placement_starts
        used.extend(range(start, start + profile.memory_slices))
        compute += profile.compute_slices
    assert len(used) == len(set(used)) and max(used, default=0) < 8
    assert compute <= 7
    counts = Counter(name for name, _ in placement)
    assert all(counts[n] <= A100.profile(n).max_instances for n in counts)
    assert counts == Counter({k: v for k, v in devices.items() if v})


def test_resource_classes_of_a_model_have_fractions_and_prices():
    classes = {c["slug"]: c for c in catalog_resource_classes(A100)}
    assert classes["a100-80gb"]["gpu_fraction"] == 1
    assert classes["a100-80gb"]["price_per_hour"] == Decimal("3.5")
    mig = classes["a100-80gb-mig-3g.40gb"]
    assert mig["resource_name"] == "nvidia.com/mig-3g.40gb"
    assert mig["gpu_fraction"] == Decimal("0.4286")  # 3 compute slices of 7
    assert mig["price_per_hour"] == Decimal("1.5000")  # 3.5 × 3/7
    assert classes["a100-80gb-mig-1g.10gb.me"]["resource_name"] == "nvidia.com/mig-1g.10gb.me"
    shared = classes["a100-80gb-shared"]
    assert shared["resource_name"] == "nvidia.com/gpu.shared"
    assert shared["gpu_fraction"] == Decimal("0.25")


def test_h200_slices_are_the_real_ones_not_the_articles():
    assert set(facts.get_model("H200-141GB").profiles) >= {
        "1g.18gb",
        "2g.35gb",
        "3g.71gb",
        "7g.141gb",
    }


def test_unknown_model_and_product_labels():
    with pytest.raises(facts.UnknownModel):
        facts.get_model("V100")
    assert facts.model_for_product_label("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb").key == "A100-80GB"
    assert facts.model_for_product_label("Tesla-K80") is None
