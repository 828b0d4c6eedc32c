"""The calibration on hand-made observations: the fit recovers known latencies, the match
column decides by the widened range, and a mismatch is reported with its reasons."""

from __future__ import annotations

import pytest

from replay.simulate import calibrate
from replay.simulate.calibrate import Fit, PolicyFigures, fit_harness, match
from replay.simulate.engine import Harness
from replay.simulate.fleet import Fleet, set_up
from replay.workload import POLICIES, ReplayPod, Window

C = 60.0  # compression: trace seconds per wall second


def job(name: str, team: int, submitted: float, start: float | None, end: float | None) -> dict:
    runs = [] if start is None else [[start, end]]
    return {
        "name": name, "team": team, "slices": 7, "milli": 1000, "submitted": submitted,
        "runs": runs, "finished": end, "preemptions": 0,
    }  # fmt: skip


def run(policy: str, jobs: list[dict], refused: int = 0) -> dict:
    started = sum(1 for j in jobs if j["runs"])
    return {
        "run_id": f"{policy}1", "policy": policy, "compression": C, "refused": refused,
        "alloc_slices": 0.5, "alloc_milli": 0.5, "started": started,
        "not_started": len(jobs) - started, "jobs": jobs,
    }  # fmt: skip


def test_the_fit_recovers_a_known_admission_and_release_latency():
    admission, release = 0.5, 0.3  # wall seconds
    jobs = [job(f"now{i}", 0, i * 2.0, i * 2.0 + admission, i * 2.0 + 1.5) for i in range(5)]
    jobs.append(job("outlier", 0, 20.0, 29.0, 30.0))  # one slow start: the median ignores it
    # waits for team 1's quota: the end of its team's job at 5.0, then release + admission
    jobs += [job("holder", 1, 0.0, 0.5, 5.0), job("waiter", 1, 1.0, 5.0 + release + admission, 7)]
    immediate = {"a": {j["name"] for j in jobs if j["name"] != "waiter"}}
    fit = fit_harness([run("a", jobs)], immediate, no_borrowing={"a"})
    assert fit.harness.admission_latency_s == pytest.approx(admission * C)
    assert fit.harness.release_latency_s == pytest.approx(release * C)
    assert fit.harness.clock_resolution_s == C
    assert (fit.admission_samples, fit.release_samples) == (7, 1)
    assert "release latency" in calibrate.describe(fit)


def test_release_is_not_observed_where_queues_borrow():
    jobs = [job("now", 0, 0.0, 0.2, 1.0), job("holder", 1, 0.0, 0.2, 5.0), job("w", 1, 1, 6, 7)]
    fit = fit_harness([run("d", jobs)], {"d": {"now", "holder"}}, no_borrowing={"a"})
    assert fit.harness.release_latency_s == 0.0 and fit.release_gap_s is None
    assert any("not observed" in n for n in fit.notes)


def test_the_fit_reports_lateness_and_refuses_mixed_compressions():
    jobs = [job("p0", 0, 1.5, 2.0, 3.0)]
    fit = fit_harness([run("a", jobs)], {"a": {"p0"}}, set(), arrivals={"p0": 1.0 * C},
                      asked_run={"p0": 0.8 * C})  # fmt: skip
    assert fit.lateness_wall_s == pytest.approx((0.5, 0.5))
    assert fit.stretch_wall_s == pytest.approx(0.2)
    other = run("b", jobs) | {"compression": 2 * C}
    with pytest.raises(ValueError, match="compressions"):
        fit_harness([run("a", jobs), other], {"a": {"p0"}}, set())
    with pytest.raises(ValueError, match="nothing to fit"):
        fit_harness([run("a", jobs)], {"a": set()}, set())


def test_match_widens_the_cluster_range_by_the_tolerances():
    alloc, started = [0.60, 0.64], [30.0, 34.0]  # started widened by 5 % of 32: ±1.6
    assert match(alloc, started, 0.665, 35.5).ok
    m = match(alloc, started, 0.68, 36.0)
    assert not m.alloc_ok and m.alloc_gap_pts == pytest.approx(1.0)
    assert not m.started_ok and m.started_gap == pytest.approx(0.4)
    low = match(alloc, started, 0.55, 30.0)
    assert low.started_ok and low.alloc_gap_pts == pytest.approx(-2.0)


def test_the_table_says_where_it_fails_and_why():
    fit = Fit(Harness(30.0, 0.0, 0.0, 0.0, C), C, 10, 0, None, (0.1, 3.0), 0.0)
    good = PolicyFigures("a", "static", [0.6, 0.62], [30, 32], [0, 0], [0, 0],
                         (0.7, 33, 0, 0), (0.61, 31, 0, 0))  # fmt: skip
    bad = PolicyFigures("d", "borrowing", [0.6, 0.62], [30, 32], [0, 0], [0, 0],
                        (0.7, 33, 2, 0), (0.70, 31, 2, 0))  # fmt: skip
    out = calibrate.table([good, bad], fit)
    assert "| a. static | 2 | 61.0% (60.0%–62.0%)" in out and "| yes |" in out
    assert "no: alloc +5.0 pts" in out
    assert "refused differ" in out and "submits ran behind" in out


def test_run_jobs_counts_the_starts_on_arrival():
    pods = [ReplayPod(f"p{n}", 0, 0.0, 3600.0, 1, 1000, "BE") for n in range(3)]
    w = Window(0, 4 * 3600, pods, 0, 0)
    setup = set_up(w, POLICIES["a"], Fleet(1, 2), teams=1)
    result, started, at_once = calibrate.run_jobs(w, setup, Harness(), seed=0)
    assert (started, len(at_once)) == (3, 2)  # two GPUs: the third waits an hour
    _, _, late = calibrate.run_jobs(w, setup, Harness(admission_latency_s=5.0), seed=0)
    assert late == set() and result.never_started == 0
