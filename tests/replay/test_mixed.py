"""Mixed mode (whole, MIG or shared GPUs), gpu_spec on the trace's models, and the published
rows of the workload read: small synthetic inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay import published
from replay.__main__ import main
from replay.mixed import pack_mixed
from replay.packed import SHARED, DrawnPod
from replay.packing import (
    METHODS,
    MIG_METHODS,
    ask_of,
    mig_model,
    pack_online_first_fit,
    run_packing,
)
from replay.packing_table import packing_table
from replay.trace import TraceNode, TracePod

A100 = mig_model("A100-80GB")


def pod(name: str, milli: int, num_gpu: int = 1, spec: str = "", cpu: int = 1000) -> TracePod:
    return TracePod(
        name=name, line=0, cpu_milli=cpu, memory_mib=1024, num_gpu=num_gpu, gpu_milli=milli,
        gpu_spec=spec, qos="", phase="", creation=0, deletion=None, scheduled=None,
    )  # fmt: skip


def node(name: str, gpus: int, model: str = "G2", cpu: int = 1_000_000) -> TraceNode:
    return TraceNode(name=name, line=0, cpu_milli=cpu, memory_mib=1 << 30, gpus=gpus, model=model)


def drawn(*pods: TracePod) -> list[DrawnPod]:
    return [DrawnPod(i, p, ask_of(p, A100)) for i, p in enumerate(pods)]


def by_method(results):
    out: dict[str, list[float]] = {}
    for r in results:
        out.setdefault(r.method, []).append(r.a_req)
    return {m: sum(v) / len(v) for m, v in out.items()}


def test_each_gpu_takes_the_most_isolated_mode_that_holds_its_pods():
    pods = drawn(pod("4g", 460), pod("3g", 320), pod("a", 300), pod("b", 300), pod("c", 300))
    fleet, placed, _ = pack_mixed(pods, [node("n", 2)], {"G2": A100})
    assert sorted(placed) == [0, 1, 2, 3, 4]
    modes = {gpu.mode: gpu for gpu in fleet}
    # 460 + 320 round to 4g + 3g, which pack: MIG. Three 300s round to 3g each (9 slices):
    # they only fit shared, one replica per pod sized to its milli.
    assert dict(modes["mig"].layout) == {"4g.40gb": 1, "3g.40gb": 1}
    assert modes["shared"].replicas == [300, 300, 300]
    assert {label for _, label in modes["shared"].pods} == {SHARED}
    (alone,), _, _ = pack_mixed(drawn(pod("lone", 460)), [node("n", 1)], {"G2": A100})
    assert alone.mode == "whole" and alone.pods == [(0, "whole")]


def test_mixed_places_an_all_sharing_workload_at_least_as_well_as_mig_only():
    # Asks that MIG rounds up badly (300 -> 3g, 150 -> 2g, 460 -> 4g): sharing by milli wins.
    pods = [pod("300", 300), pod("150", 150), pod("460", 460), pod("220", 220)]
    nodes = [node("a", 4), node("b", 2), node("c", 1)]
    results = run_packing(pods, nodes, rho=1.3, seeds=range(4), progress=None)
    a_req = by_method(results)
    assert set(a_req) == set(METHODS)
    for mig_only in MIG_METHODS:
        assert a_req["mixed"] >= a_req[mig_only]
        assert a_req["online-best-fit"] >= a_req["online-first-fit"]
    assert a_req["mixed"] > max(a_req[m] for m in MIG_METHODS)  # strictly, on this workload
    per_seed = {(r.method, r.seed): r.a_req for r in results}
    for r in results:
        if r.method == "mixed":
            assert r.shared_gpus > 0 and r.a_req <= r.a_slice <= 1
            # arrival order is one of the plans it tries: never below the online best fit
            assert r.a_req >= per_seed[("online-best-fit", r.seed)]


def test_gpu_spec_pods_never_land_on_another_model():
    pods = [pod("t4", 300, spec="T4"), pod("v100", 1000, spec="V100M16|V100M32"), pod("any", 460)]
    pods += [pod("t4-whole", 1000, spec="T4"), pod("two", 1000, num_gpu=2, spec="V100M32")]
    nodes = [node("g", 4, "G2"), node("t", 2, "T4"), node("v16", 1, "V100M16")]
    nodes += [node("v32", 2, "V100M32")]
    results = run_packing(pods, nodes, rho=1.3, seeds=range(5), progress=None)
    model_of = {n.name: n.model for n in nodes}
    landed = 0
    for r in results:
        draw = {}
        for gid, gpu in enumerate(r.fleet):
            for position, _ in gpu.pods:
                draw.setdefault(position, set()).add(model_of[r.fleet[gid].node])
        positions = sorted(r.placements)
        assert positions == sorted(draw)
        drawn_pods = r.pods
        for position, models in draw.items():
            spec = drawn_pods[position].pod.models
            if spec:
                landed += 1
                assert models <= spec, f"{r.method}: {drawn_pods[position].pod.name} on {models}"
    assert landed


def test_a_pod_pinned_to_a_model_no_node_has_fails():
    results = run_packing(
        [pod("p100", 300, spec="P100")], [node("g", 2)], rho=1.0, seeds=[0], progress=None
    )
    assert all(r.placed == 0 and r.failed == r.drawn for r in results)


def test_published_rows_are_the_workload_reads():
    assert published.workload_of("/x/openb_pod_list_gpuspec33.csv") == "openb_pod_list_gpuspec33"
    rows = {r.policy: r.a_req for r in published.published_rows("openb_pod_list_gpuspec33", 1.3)}
    assert rows["FGD"] == published.PUBLISHED["openb_pod_list_gpuspec33"]["FGD"][1]
    assert rows != {
        r.policy: r.a_req for r in published.published_rows("openb_pod_list_default", 1.3)
    }
    at_one = published.published_rows("openb_pod_list_default", 1.0)
    assert [r.a_req for r in at_one] == [
        v[0] for v in published.PUBLISHED["openb_pod_list_default"].values()
    ]
    assert published.published_rows("openb_pod_list_gpushare20", 1.3) is None  # no rows
    assert published.published_rows("openb_pod_list_default", 1.2) is None  # not kept
    results = run_packing([pod("a", 500)], [node("g", 1)], seeds=[0], progress=None)
    fgd_10 = published.PUBLISHED["openb_pod_list_gpuspec10"]["FGD"][1]
    table = packing_table(results, "openb_pod_list_gpuspec10")
    assert f"| FGD (published, openb_pod_list_gpuspec10, fractional GPUs) | {fgd_10:.2f} |" in table
    assert "openb_pod_list_default" not in table
    assert "| mine at ρ = 1.3: not published |" in packing_table(results, "mine")


def test_part_two_reads_a_short_pod_list_and_prints_its_rows(tmp_path: Path, capsys):
    """End to end: a pod list of the family without gpu_spec, qos, phase or times."""
    (tmp_path / "openb_pod_list_multigpu50.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        "a,1000,1024,1,460\nb,1000,1024,2,1000\nc,1000,1024,1,1000\nd,0,0,0,0\n"
    )
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,4,G2\nn2,64000,262144,2,T4\n"
    )
    code = main(
        ["--part", "packing", "--trace", str(tmp_path), "--seeds", "2", "--out", str(tmp_path),
         "--pods-file", "openb_pod_list_multigpu50.csv", "--methods", "mixed,online-first-fit"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    fgd = published.PUBLISHED["openb_pod_list_multigpu50"]["FGD"][1]
    assert f"| FGD (published, openb_pod_list_multigpu50, fractional GPUs) | {fgd:.2f} |" in out
    assert "| mixed (whole, MIG or shared" in out and "| planner (" not in out
    assert (tmp_path / "replay.md").read_text().count("openb_pod_list_multigpu50") >= 2


@pytest.mark.parametrize("bad", ["name,cpu_milli,memory_mib,gpu_milli\na,1,2,3\n"])
def test_part_two_refuses_a_malformed_pod_list_with_line_and_column(tmp_path, capsys, bad):
    (tmp_path / "pods.csv").write_text(bad)
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,1,G2\n"
    )
    code = main(["--part", "packing", "--trace", str(tmp_path), "--pods-file", "pods.csv",
                 "--out", str(tmp_path)])  # fmt: skip
    assert code == 2
    assert "pods.csv:1:5: header lacks column 'num_gpu'" in capsys.readouterr().err


def test_cpu_only_pods_take_cpu_where_the_gpus_are_taken():
    pods = drawn(pod("w", 1000), pod("cpu", 0, num_gpu=0, cpu=4000), pod("x", 1000, cpu=4000))
    nodes = [node("a", 1, cpu=8000), node("b", 1, cpu=8000)]
    for _, placed, _ in (
        pack_mixed(pods, nodes, {"G2": A100}, online=True),
        pack_online_first_fit(pods, nodes, A100),
    ):
        # the CPU-only pod goes to a, whose GPU w holds; x still finds b's CPU and GPU
        assert placed == {0: [0], 1: [], 2: [1]}
