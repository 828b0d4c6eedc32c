"""The pure planner: enumeration from the catalog, packing, objectives, names of configs."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import facts
from scheduler.mig import configs as mig_configs
from scheduler.mig import planner as pl
from scheduler.mig import publishing

A100 = "A100-80GB"
CLASSIC = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
MODEL = facts.get_model(A100)
SHAPES = pl.candidate_shapes(A100, "time-slicing", (4,))
MIG_SHAPES = [s for s in SHAPES if s.mode == "mig"]


def mig(**devices) -> pl.Shape:
    return pl.Shape.mig({k.replace("_", ".").replace("g.", "g.", 1): v for k, v in devices.items()})


def shape(*pairs: tuple[str, int]) -> pl.Shape:
    return pl.Shape.mig(dict(pairs))


def gpu(node, index, s, busy=(), pods=()):
    return pl.GpuState(node, index, A100, s, tuple(sorted(busy)), tuple(pods))


SEVENTHS = shape(("1g.10gb", 7))
HALVES = shape(("3g.40gb", 2))


def test_enumeration_matches_nvidia_counts():
    placements = facts.maximal_placements(MODEL, CLASSIC)
    assert len(placements) == 19  # NVIDIA's valid combinations (R510+)
    assert len({facts.as_multiset(p) for p in placements}) == 14
    assert len(facts.packable_multisets(MODEL, CLASSIC) - {()}) == 37
    with_1g20 = [*CLASSIC, "1g.20gb"]
    assert len(facts.packable_multisets(MODEL, with_1g20) - {()}) == 77


@pytest.mark.parametrize("key", [m.key for m in facts.load_catalog().values() if m.mig_capable])
def test_every_candidate_shape_packs(key):
    model = facts.get_model(key)
    shapes = pl.candidate_shapes(key, "time-slicing", (2, 4))
    assert pl.WHOLE in shapes
    for s in shapes:
        if s.mode == "mig":
            assert facts.can_pack(model, dict(s.devices)), s


def test_candidates_are_the_maximal_multisets():
    # 3g+2g+1g is a maximal placement's multiset but lies inside 3g+2g+2x1g: not a candidate.
    assert shape(("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 2)) in MIG_SHAPES
    assert shape(("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 1)) not in MIG_SHAPES
    assert len(MIG_SHAPES) == len(
        facts.maximal_multisets(MODEL, [p for p in MODEL.profiles if "+me" not in p])
    )


def test_demand_that_fits_changes_nothing():
    gpus = [gpu("n1", 0, SEVENTHS), gpu("n1", 1, HALVES)]
    demand = {"a100-80gb-mig-1g.10gb": 5, "a100-80gb-mig-3g.40gb": 2}
    for solve in (pl.plan_exact, pl.plan_greedy):
        result = solve(gpus, demand)
        assert result.changed == [] and result.unserved == {}


def test_short_demand_reshapes_a_free_gpu_not_a_busy_one():
    gpus = [
        gpu("n1", 0, SEVENTHS, busy=[("a100-80gb-mig-1g.10gb", 1)], pods=["t/p"]),
        gpu("n1", 1, SEVENTHS),
    ]
    demand = {"a100-80gb-mig-2g.20gb": 3}
    result = pl.plan_exact(gpus, demand)
    assert result.changed == [("n1", 1)]
    assert result.unserved == {} and result.disturbed_pods == []
    assert dict(result.proposed[("n1", 1)].devices)["2g.20gb"] == 3


def test_infeasible_demand_is_reported_not_dropped():
    gpus = [gpu("n1", 0, SEVENTHS)]
    result = pl.plan_exact(gpus, {"a100-80gb-mig-7g.80gb": 3})
    assert result.served == {"a100-80gb-mig-7g.80gb": 1}
    assert result.unserved == {"a100-80gb-mig-7g.80gb": 2}


def test_busy_gpus_change_only_when_draining_is_allowed():
    gpus = [gpu("n1", 0, SEVENTHS, busy=[("a100-80gb-mig-1g.10gb", 2)], pods=["t/a", "t/b"])]
    demand = {"a100-80gb-mig-3g.40gb": 2}
    assert pl.plan_exact(gpus, demand).changed == []
    drained = pl.plan_exact(gpus, demand, pl.Policy(allow_draining=True))
    assert drained.changed == [("n1", 0)] and drained.disturbed_pods == ["t/a", "t/b"]


def test_only_chosen_nodes_change():
    gpus = [gpu("a", 0, SEVENTHS), gpu("b", 0, SEVENTHS)]
    demand = {"a100-80gb-mig-3g.40gb": 4}
    result = pl.plan_exact(gpus, demand, pl.Policy(nodes=frozenset({"b"})))
    assert result.changed == [("b", 0)] and result.unserved == {"a100-80gb-mig-3g.40gb": 2}


def test_non_mig_nodes_get_shared_replicas():
    gpus = [pl.GpuState("l", i, "L40S-48GB", pl.WHOLE) for i in range(4)]
    result = pl.plan_exact(gpus, {"l40s-48gb-shared": 16})
    assert {result.proposed[("l", i)] for i in range(4)} == {pl.Shape("shared", (), 4)}
    proposals, _ = mig_configs.propose_nodes(gpus, result, {"l": ("", "default")}, {})
    assert proposals[0].device_plugin_config == "time-sliced-4-renamed"
    mps = mig_configs.propose_nodes(
        gpus, result, {"l": ("", "default")}, {}, pl.Policy(sharing="mps")
    )
    assert mps[0][0].device_plugin_config == "mps-4-renamed"


@pytest.mark.parametrize("sharing", ["time-slicing", "mps"])
@pytest.mark.parametrize("replicas", [2, 4, 8])
def test_every_shared_config_the_planner_proposes_advertises_the_shared_resource(sharing, replicas):
    """Shared classes ask for nvidia.com/gpu.shared: a config without renameByDefault would
    advertise plain nvidia.com/gpu, and the replicas pools count could never be used."""
    from catalog import facts

    gpus = [pl.GpuState("l", 0, "L40S-48GB", pl.WHOLE)]
    shape = pl.Shape("shared", (), replicas)
    result = pl.PlanResult(
        method="test",
        proposed={("l", 0): shape},
        demand={},
        supply_before={},
        supply_after={},
        served={},
        unserved={},
        changed=[("l", 0)],
        disturbed_pods=[],
    )
    proposals, _ = mig_configs.propose_nodes(
        gpus, result, {"l": ("", "default")}, {}, pl.Policy(sharing=sharing)
    )
    name = proposals[0].device_plugin_config
    config = publishing.device_plugin_configs()[name]
    section = config["sharing"]["mps" if sharing == "mps" else "timeSlicing"]
    assert section["renameByDefault"] is True
    assert section["resources"] == [{"name": "nvidia.com/gpu", "replicas": replicas}]
    assert facts.SHARED_GPU_RESOURCE == "nvidia.com/gpu.shared"


def test_popular_shapes_are_kept_free():
    # Two free GPUs, demand for one 4g: the other stays in the most asked-for shape.
    gpus = [gpu("n", 0, HALVES), gpu("n", 1, SEVENTHS)]
    demand = {"a100-80gb-mig-4g.40gb": 1, "a100-80gb-mig-1g.10gb": 7}
    result = pl.plan_exact(gpus, demand)
    assert result.unserved == {"a100-80gb-mig-4g.40gb": 0} or result.unserved == {}
    assert result.changed == [("n", 0)]


def test_known_config_names_are_reused_and_others_generated():
    known = {
        "all-balanced": [
            {
                "devices": "all",
                "mig-enabled": True,
                "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
            }
        ],
        "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    }
    gpus = [gpu("n", 0, SEVENTHS), gpu("n", 1, SEVENTHS)]
    balanced = shape(("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1))
    result = pl.PlanResult(
        "exact",
        {("n", 0): balanced, ("n", 1): balanced},
        {},
        {},
        {},
        {},
        {},
        [("n", 0), ("n", 1)],
        [],
    )
    proposals, new = mig_configs.propose_nodes(
        gpus, result, {"n": ("all-1g.10gb", "default")}, known
    )
    assert proposals[0].mig_config == "all-balanced" and new == {}

    result.proposed[("n", 1)] = SEVENTHS
    result.changed = [("n", 0)]
    proposals, new = mig_configs.propose_nodes(
        gpus, result, {"n": ("all-1g.10gb", "default")}, known
    )
    name = proposals[0].mig_config
    assert name.startswith("portal-a100-80gb-") and len(name) <= 63
    assert mig_configs.config_shapes(MODEL, 2, new[name]) == [balanced, SEVENTHS]
    assert proposals[0].changed_gpus == [0]


@st.composite
def fleets(draw):
    n = draw(st.integers(1, 12))
    gpus = []
    for i in range(n):
        s = draw(st.sampled_from([pl.WHOLE, *MIG_SHAPES]))
        units = pl.instance_units(MODEL, s)
        k = draw(st.integers(0, len(units)))
        busy = tuple(sorted(Counter(units[:k]).items()))
        gpus.append(gpu(f"n{i // 4}", i % 4, s, busy, (f"t/p{i}",) if k else ()))
    profiles = [p for p in MODEL.profiles if "+me" not in p]
    demand = {
        pl.class_slug(MODEL, "mig", p): draw(st.integers(0, 10))
        for p in draw(st.lists(st.sampled_from(profiles), max_size=4, unique=True))
    }
    if draw(st.booleans()):
        demand[pl.class_slug(MODEL, "whole")] = draw(st.integers(0, 4))
    return gpus, demand


@settings(max_examples=60, deadline=None)
@given(fleets(), st.booleans())
def test_plans_pack_spare_busy_gpus_and_account_for_all_demand(fleet, drain):
    gpus, demand = fleet
    policy = pl.Policy(allow_draining=drain)
    exact = pl.plan_exact(gpus, demand, policy)
    greedy = pl.plan_greedy(gpus, demand, policy)
    for result in (exact, greedy):
        for g in gpus:
            s = result.proposed[(g.node, g.index)]
            if s.mode == "mig":
                assert facts.can_pack(MODEL, dict(s.devices))
            if g.busy and not drain:
                assert s == g.shape
        for c, n in result.demand.items():
            assert result.served[c] + result.unserved.get(c, 0) == n
    # Exact is optimal on objective 1, so never below the baseline.
    assert exact.served_weight() >= greedy.served_weight() - 1e-9
    if all(exact.supply_before.get(c, 0) >= n for c, n in demand.items()):
        assert exact.changed == []
    # At the baseline's level of service, exact never changes more GPUs.
    level = pl.plan_exact(
        gpus, demand, pl.Policy(allow_draining=drain, serve_at_least=greedy.served_weight())
    )
    assert len(level.changed) <= len(greedy.changed)
