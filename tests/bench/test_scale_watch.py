"""The scale bench's recorders on made-up watch events (pure: no database, no cluster)."""

from bench.scale_cpu import parse_stat, spent
from bench.scale_watch import Admissions, PodStarts, lags, slowest
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL


def kueue_workload(job: str, *conditions: str, namespace: str = "ns") -> dict:
    return {
        "metadata": {"namespace": namespace, "ownerReferences": [{"kind": "Job", "name": job}]},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


def test_an_admission_counts_once_at_the_first_event_that_shows_it():
    seen = Admissions()
    seen({"type": "ADDED", "object": kueue_workload("a")}, 1.0)
    seen({"type": "MODIFIED", "object": kueue_workload("a", "QuotaReserved", "Admitted")}, 2.0)
    seen({"type": "MODIFIED", "object": kueue_workload("a", "Admitted", "Finished")}, 7.0)
    seen({"type": "DELETED", "object": kueue_workload("a", "Admitted", "Finished")}, 8.0)
    assert seen.times([("ns", "a")]) == [2.0]
    assert seen.settled([("ns", "a")]) == 1


def test_a_workload_gone_unadmitted_settles_without_an_admission():
    """Nobody waits for a Job whose Workload finished or was deleted before being admitted."""
    seen = Admissions()
    seen({"type": "DELETED", "object": kueue_workload("b")}, 3.0)
    seen({"type": "MODIFIED", "object": kueue_workload("c", "Finished")}, 4.0)
    keys = [("ns", "b"), ("ns", "c"), ("ns", "d")]
    assert seen.settled(keys) == 2
    assert seen.times(keys) == []


def test_jobs_of_one_name_in_two_namespaces_are_two():
    """An earlier run's `alone-1` in its own namespace does not stand for this run's."""
    seen = Admissions()
    seen({"type": "MODIFIED", "object": kueue_workload("alone-1", "Admitted", namespace="x")}, 1)
    assert seen.times([("y", "alone-1")]) == []
    assert seen.wait([("x", "alone-1")], timeout_s=1, stall_s=1) == [1]


def test_a_stalled_wait_ends_and_says_how_many_settled(capsys):
    seen = Admissions()
    assert seen.wait([("ns", "never")], timeout_s=30, stall_s=0.1) == []
    assert "stalled at 0/1" in capsys.readouterr().out


def pod(workload: str, phase: str, started: bool = True) -> dict:
    status: dict = {"phase": phase}
    if started:
        status["containerStatuses"] = [{"name": "main"}]
    return {"metadata": {"labels": {WORKLOAD_LABEL: workload}}, "status": status}


def test_a_pod_starts_when_first_seen_running_or_already_past_it():
    starts = PodStarts()
    starts({"type": "ADDED", "object": pod("1", "Pending", started=False)}, 1.0)
    starts({"type": "MODIFIED", "object": pod("1", "Running")}, 2.0)
    starts({"type": "MODIFIED", "object": pod("1", "Succeeded")}, 7.0)
    starts({"type": "MODIFIED", "object": pod("2", "Succeeded")}, 5.0)  # ran between events
    starts({"type": "MODIFIED", "object": pod("3", "Failed", started=False)}, 5.0)  # never ran
    assert starts.at == {1: 2.0, 2: 5.0}


def test_lags_pair_each_row_with_its_pod():
    assert lags({1: 2.0, 2: 5.0, 3: 6.0}, {1: 3.5, 2: 5.25, 4: 9.0}) == [1.5, 0.25]


def test_a_proc_stat_line_gives_its_command_and_cpu_ticks():
    line = "4242 (kube-apiserver) S 1 4242 4242 0 -1 4194560 9 0 0 0 1500 250 0 0 20 0 12 0"
    assert parse_stat(line) == ("kube-apiserver", 1750.0)
    odd = "7 (tmux: server (1)) S 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0"
    assert parse_stat(odd) == ("tmux: server (1)", 7.0)


def test_cpu_spent_is_per_command_and_leaves_out_the_idle():
    before = {"etcd": 10.0, "postgres": 5.0}
    after = {"etcd": 14.5, "postgres": 5.0, "kwok": 2.0}
    assert spent(before, after) == {"etcd": 4.5, "kwok": 2.0}


def test_the_slowest_lags_say_when_their_pods_started_and_which_sync_runs_they_waited_through():
    pod_at = {1: 100.0, 2: 101.0, 3: 102.0}
    row_at = {1: 100.5, 2: 109.0, 3: 103.0}
    runs = [(99.0, 102.5), (102.6, 106.0), (106.1, 109.5), (110.0, 113.0)]
    lines = slowest(pod_at, row_at, runs, since=100.0, n=2)
    assert lines == [
        "  8.00 s: pod started at 1.0 s, row at 9.0 s; sync runs -1.0-2.5, 2.6-6.0, 6.1-9.5",
        "  1.00 s: pod started at 2.0 s, row at 3.0 s; sync runs -1.0-2.5, 2.6-6.0",
    ]
