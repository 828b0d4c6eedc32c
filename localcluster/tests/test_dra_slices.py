"""The ResourceSlices and DeviceClasses the simulated NVIDIA DRA driver publishes (pure): every
MIG placement of the catalog as a device consuming its GPU's counters, and the counters
allowing exactly the layouts the catalog's placement rule allows."""

from collections import Counter
from itertools import product

import pytest

from catalog import dra_devices as dd
from catalog import facts
from localcluster import dra_slices as ds
from localcluster import gpu_layout


def quantity(text: str) -> int:
    return int(text.removesuffix("Mi"))


def devices_of(slices: list[dict], minor: int = 0) -> dict[str, dict]:
    return {d["name"]: d for d in slices[minor + 1]["spec"]["devices"]}


def counters_of(slices: list[dict], minor: int = 0) -> dict[str, int]:
    (cs,) = [
        c for c in slices[0]["spec"]["sharedCounters"] if c["name"] == f"gpu-{minor}-counter-set"
    ]
    return {k: quantity(v["value"]) for k, v in cs["counters"].items()}


def fits(slices: list[dict], names: list[str], minor: int = 0) -> bool:
    """What the scheduler checks: the devices' consumption, summed, within the counter set."""
    devices = devices_of(slices, minor)
    used: Counter = Counter()
    for name in names:
        for consumption in devices[name]["consumesCounters"]:
            assert consumption["counterSet"] == f"gpu-{minor}-counter-set"
            used.update({k: quantity(v["value"]) for k, v in consumption["counters"].items()})
    available = counters_of(slices, minor)
    return all(used[k] <= available.get(k, 0) for k in used)


def device_name(model: dd.DraModel, profile: str, start: int) -> str:
    return dd.mig_device_name(0, profile, model.profiles[profile].profile_id, start)


@pytest.fixture(scope="module")
def a100():
    return ds.resource_slices("kwok-a100-0", "A100-80GB", 2)


def test_pool_is_one_counters_slice_then_one_slice_per_gpu(a100):
    assert [s["metadata"]["name"] for s in a100] == [
        "0-gpu.nvidia.com-kwok-a100-0",
        "1-gpu.nvidia.com-kwok-a100-0",
        "2-gpu.nvidia.com-kwok-a100-0",
    ]
    for s in a100:
        assert s["apiVersion"] == "resource.k8s.io/v1"
        assert s["spec"]["driver"] == "gpu.nvidia.com"
        assert s["spec"]["nodeName"] == "kwok-a100-0"
        assert s["spec"]["pool"] == {
            "name": "kwok-a100-0",
            "generation": 1,
            "resourceSliceCount": 3,
        }
    assert "devices" not in a100[0]["spec"]
    assert [c["name"] for c in a100[0]["spec"]["sharedCounters"]] == [
        "gpu-0-counter-set",
        "gpu-1-counter-set",
    ]
    assert all("sharedCounters" not in s["spec"] for s in a100[1:])


def test_counter_set_is_the_whole_gpu(a100):
    assert counters_of(a100) == {
        "multiprocessors": 98,
        "memory": 80 * 1024,
        **{f"memory-slice-{i}": 1 for i in range(8)},
    }


@pytest.mark.parametrize("key", [m.key for m in dd.served_models()])
def test_every_placement_is_a_device_consuming_its_profile_and_memory_slices(key):
    slices = ds.resource_slices("n", key, 1)
    model = dd.dra_model(key)
    catalog = facts.get_model(key)
    devices = devices_of(slices)
    expected = {"gpu-0"} | {
        device_name(model, p.name, s) for p in catalog.profiles.values() for s in p.placement_starts
    }
    assert set(devices) == expected
    assert list(devices) == sorted(devices)  # the driver sorts by name
    for p in catalog.profiles.values():
        for start in p.placement_starts:
            dev = devices[device_name(model, p.name, start)]
            assert dev["attributes"]["type"] == {"string": "mig"}
            assert dev["attributes"]["profile"] == {"string": p.name}
            (used,) = dev["consumesCounters"]
            slices_used = sorted(k for k in used["counters"] if k.startswith("memory-slice-"))
            assert slices_used == sorted(
                f"memory-slice-{i}" for i in range(start, start + p.memory_slices)
            )
            mp = int(used["counters"]["multiprocessors"]["value"])
            assert mp == model.profiles[p.name].multiprocessors
            assert dev["capacity"]["multiprocessors"] == {"value": str(mp)}
    whole = devices["gpu-0"]
    assert whole["attributes"]["type"] == {"string": "gpu"}
    assert {
        k: quantity(v["value"]) for k, v in whole["consumesCounters"][0]["counters"].items()
    } == (counters_of(slices))


def test_catalog_sm_counts_and_names():
    a100 = dd.dra_model("A100-80GB")
    assert {p.name: p.multiprocessors for p in a100.profiles.values()} == {
        "1g.10gb": 14,
        "1g.10gb+me": 14,  # the same GI profile id on the A100-40GB
        "1g.20gb": 14,  # ditto (id 15)
        "2g.20gb": 28,
        "3g.40gb": 42,
        "4g.40gb": 56,
        "7g.80gb": 98,
    }
    assert dd.mig_device_name(3, "1g.10gb+me", 20, 6) == "gpu-3-mig-1g10gb-me-20-6"
    assert dd.mig_device_name(0, "3g.40gb", 9, 4) == "gpu-0-mig-3g40gb-9-4"


def test_a_4g_and_a_3g_fit_one_a100_together_and_seven_1g(a100):
    model = dd.dra_model("A100-80GB")
    assert fits(a100, [device_name(model, "4g.40gb", 0), device_name(model, "3g.40gb", 4)])
    seven = [device_name(model, "1g.10gb", s) for s in range(7)]
    assert fits(a100, seven)
    # an eighth instance would need the 8th memory slice with a 1g.10gb+me: over the SMs
    assert not fits(a100, [*seven, device_name(model, "1g.10gb+me", 6)])
    assert not fits(a100, [device_name(model, "3g.40gb", 0), device_name(model, "4g.40gb", 0)])
    assert not fits(a100, ["gpu-0", device_name(model, "1g.10gb", 0)])  # whole or parts
    assert fits(a100, ["gpu-0"])


@pytest.mark.parametrize("key", ["A30-24GB", "A100-80GB", "H100-80GB", "H200-141GB"])
def test_counters_admit_exactly_the_catalogs_packable_layouts(key):
    """Every multiset of (non-+me) profiles fits the counters at some placements iff the
    catalog's placement rule packs it on one GPU."""
    slices = ds.resource_slices("n", key, 1)
    model = dd.dra_model(key)
    catalog = facts.get_model(key)
    names = [n for n in catalog.profiles if not n.endswith("+me")]
    checked = 0
    for counts in product(*(range(catalog.profile(n).max_instances + 1) for n in names)):
        wanted = {n: c for n, c in zip(names, counts, strict=True) if c}
        if sum(catalog.profile(n).compute_slices * c for n, c in wanted.items()) > 8:
            continue
        choices = [(n, s) for n, c in wanted.items() for s in catalog.profile(n).placement_starts]
        by_counters = _some_placement_fits(slices, model, wanted, choices)
        assert by_counters == facts.can_pack(catalog, wanted), wanted
        checked += 1
    assert checked > 20


def _some_placement_fits(slices, model, wanted, choices) -> bool:
    from itertools import combinations

    need = sum(wanted.values())
    for combo in combinations(choices, need):
        if Counter(n for n, _ in combo) != Counter(wanted):
            continue
        if fits(slices, [device_name(model, n, s) for n, s in combo]):
            return True
    return need == 0


def test_h100_counters_use_the_catalog_multiprocessors():
    slices = ds.resource_slices("h", "H100-80GB", 1)
    assert counters_of(slices)["multiprocessors"] == 132
    h100 = dd.dra_model("H100-80GB")
    assert fits(slices, [device_name(h100, "4g.40gb", 0), device_name(h100, "3g.40gb", 4)])
    assert fits(slices, [device_name(h100, "1g.20gb", s) for s in (0, 2, 4, 6)])


def test_models_the_catalog_cannot_describe_are_refused():
    with pytest.raises(dd.NotServed, match="not MIG-capable"):
        ds.resource_slices("n", "L40S-48GB", 1)
    with pytest.raises(dd.NotServed, match="no multiprocessor count for B200-180GB"):
        ds.resource_slices("n", "B200-180GB", 1)
    with pytest.raises(gpu_layout.LayoutError, match="1 to 8"):
        ds.resource_slices("n", "A100-80GB", 9)


def test_device_classes_as_the_driver_installs_them():
    gpu, mig = ds.device_classes()
    assert gpu == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": "device.driver == 'gpu.nvidia.com' && "
                        "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                    }
                }
            ],
            "extendedResourceName": "nvidia.com/gpu",
        },
    }
    assert mig["metadata"]["name"] == "mig.nvidia.com"
    assert mig["spec"]["selectors"][0]["cel"]["expression"].endswith(".type == 'mig'")
    without = ds.device_classes(extended_resource_name=False)[0]
    assert "extendedResourceName" not in without["spec"]


def test_product_name_normalises_to_the_gfd_label():
    for model in dd.served_models():
        name = dd.simulated_product_name(model.product_label)
        assert name.replace(" ", "-") == model.product_label
