"""The replay's table: one row per policy, the mean of its repeats and their range."""

import json

from replay import metrics, report
from replay.overtime import PolicyRun
from replay.workload import POLICIES


def run(key, alloc_milli, *, alloc_slices=0.5, wait=100.0, shares=(1.0, 0.5)):
    measured = metrics.Measured(
        alloc_slices=alloc_slices,
        alloc_milli=alloc_milli,
        wait_p50=wait,
        wait_p95=wait * 2,
        not_started=3,
        started=7,
        finished_per_hour=2.0,
        team_share=dict(enumerate(shares)),
        preemptions=1,
        series=[(0.5, alloc_slices), (1.5, alloc_slices)],
    )
    return PolicyRun(POLICIES[key], measured, 10, 0, 8, {0: 1.0, 1: 1.0}, 0.1, 1.0)


def test_repeats_are_averaged_with_their_range_and_gains_are_between_means():
    runs = [run("a", 0.60), run("b", 0.70), run("a", 0.64), run("b", 0.66, wait=300.0)]
    table = report.overtime_table(runs)
    rows = [
        line for line in table.splitlines() if line.startswith("| a.") or line.startswith("| b.")
    ]
    assert len(rows) == 2
    a, b = rows
    assert "| 2 | 50.0% (50.0–50.0) | 62.0% (60.0–64.0) |" in a
    assert "| 68.0% (66.0–70.0) | 200 / 400 |" in b
    assert "| +6.0 | +35 |" in b  # 68.0 − 62.0, beside the seed's MIG claim
    assert "Combined (b over a, by milli): +6.0 points" in table


def test_a_single_run_shows_no_range():
    table = report.overtime_table([run("a", 0.6), run("e", 0.5)])
    assert "| 1 | 50.0% | 60.0% |" in table
    assert "Combined (e over a, by milli): -10.0 points measured; the seed claims +50." in table


def test_the_chart_draws_the_mean_of_the_repeats(tmp_path):
    runs = [run("a", 0.6, alloc_slices=0.4), run("a", 0.6, alloc_slices=0.8)]
    path = report.allocation_chart(runs, tmp_path / "a.png", "test")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_observations_carry_every_job_as_the_cluster_served_it_and_are_json():
    r = run("b", 0.7)
    r.run_id, r.compression = "b2", 60.0
    job = metrics.JobRecord("pod-1", 1, 7.0, 1000, submitted=2.5)
    job.runs, job.finished = [(3.0, 4.0), (6.0, 9.5)], 9.5
    job.preemptions = 1
    r.jobs = [job]
    back = json.loads(json.dumps(report.observations([r])))
    (one,) = back["runs"]
    assert (one["run_id"], one["policy"], one["compression"]) == ("b2", "b", 60.0)
    assert one["alloc_milli"] == 0.7 and one["started"] == 7 and one["not_started"] == 3
    assert one["jobs"] == [
        {
            "name": "pod-1",
            "team": 1,
            "slices": 7.0,
            "milli": 1000,
            "submitted": 2.5,
            "runs": [[3.0, 4.0], [6.0, 9.5]],
            "finished": 9.5,
            "preemptions": 1,
        }
    ]
