"""The smoke version of `make replay`'s part 1: every policy (and row h, whose reclaim is the
portal's own controller) on the local cluster, over a small trace written here in the trace's
own format (the real one is evaluation data that the project never carries), a 2-node fleet
and a few seconds per policy."""

import csv
import random

import pytest

from catalog.models import Pool
from replay import overtime, report, trace
from replay.workload import select_window
from scheduler.cluster.kube import KubeGateway

# transaction=True: the replay submits from several threads, each with its own connection
pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

TRACE_SECONDS = 2 * 3600
SECONDS_PER_POLICY = 10.0


def write_trace(path, pods=160, seed=5):
    """Arrivals over two hours, run times of minutes to an hour, the trace's mix of asks."""
    rng = random.Random(seed)
    asks = [(1, 100), (1, 200), (1, 460), (1, 810), (1, 1000), (2, 1000), (8, 1000)]
    weights = [10, 20, 25, 15, 20, 6, 1]
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(trace.POD_COLUMNS)
        for i in range(pods):
            num_gpu, milli = rng.choices(asks, weights)[0]
            creation = int(rng.uniform(0, TRACE_SECONDS))
            run = int(rng.expovariate(1 / 1200)) + 30
            out.writerow([
                f"smoke-pod-{i:04d}", 4000, 16384, num_gpu, milli, "",
                rng.choice(["LS", "BE"]), "Running", creation, creation + run, creation,
            ])  # fmt: skip
    return path


def test_every_policy_replays_through_the_portal_and_is_measured(
    tmp_path, kube_cluster, portal_kubeconfig, settings
):
    pods = trace.read_pods(write_trace(tmp_path / "pods.csv"))
    window = select_window(pods, length=TRACE_SECONDS, end=TRACE_SECONDS, teams=3, seed=1)
    cfg = overtime.FleetConfig(nodes=2, gpus_per_node=8)
    settings.KUBECONFIG = portal_kubeconfig
    runs = overtime.run_all(
        window,
        list("abcdeh"),
        compression=TRACE_SECONDS / SECONDS_PER_POLICY,
        cfg=cfg,
        teams=3,
        kubeconfig=portal_kubeconfig,
        admin_kubeconfig=str(kube_cluster.kubeconfig),
        progress=lambda msg: None,
    )
    by_key = {r.policy.key: r for r in runs}
    assert list(by_key) == list("abcdeh")
    for run in runs:
        m = run.measured
        assert run.submitted + run.refused == len(window.pods), run.notes
        assert m.started + m.not_started == run.submitted
        assert m.started > 0 and m.finished_per_hour > 0  # pods ran and finished (KWOK stages)
        assert 0 < m.alloc_slices <= 1 and 0 < m.alloc_milli <= m.alloc_slices + 1e-9
    # whole GPUs only: nothing reconfigured; c turns a node to time-slicing (its 8 GPUs count
    # as reconfigured). Whether b's planner splits GPUs depends on the demand: here whole-GPU
    # grants fill the small fleet, and the planner keeps it whole.
    assert by_key["a"].reconfigured_gpus == 0
    assert by_key["c"].reconfigured_gpus >= cfg.gpus_per_node
    # h: the portal's reclaim controller ran beside it, with the row's grace at the replay's
    # pace (10 trace minutes at 720× rounds up to 1 s); a…e left reclaim to Kueue
    replayed = Pool.objects.filter(resource_class__gpu_model=cfg.model)
    assert replayed and {p.reclaim_grace_s for p in replayed} == {1}
    # a static team never holds more than its grant; with borrowing someone may
    assert all(s <= 1.0 + 1e-6 for s in by_key["a"].measured.team_share.values())
    table = report.overtime_table(runs)
    assert (
        table.count("\n| ") == 6
        and "| refused |" in table
        and "+35" in table
        and "the seed claims +50" in table
    )
    chart = report.allocation_chart(runs, tmp_path / "allocation.png", "smoke")
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the replay's nodes and namespaces are gone from the cluster again
    admin = KubeGateway.from_kubeconfig(str(kube_cluster.kubeconfig))
    assert admin.list("Node", label_selector=overtime.fleet_selector()) == []
    prefix = settings.TENANT_NAMESPACE_PREFIX
    assert not [
        n for n in admin.list("Namespace") if n["metadata"]["name"].startswith(f"{prefix}a-team")
    ]
