"""How a workload reads on its pages (pure functions, no database)."""

import shlex
from datetime import UTC, datetime, timedelta

from scheduler.workloads.pages.presenting import (
    billing_words,
    command_line,
    logs_unavailable_message,
    plain_duration,
    run_time,
    state_note,
)

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def test_a_reason_that_repeats_the_state_is_left_out():
    assert state_note("Running", "Running") == ""
    assert state_note("Cancelled", "cancelled") == ""
    assert state_note("Failed", "Deleted") == "Deleted"
    assert state_note("Pending", "") == ""


def test_the_command_keeps_its_quoting():
    line = command_line(["python", "train.py"], ["--msg", "hello world", "--x=$HOME"])
    assert line == "python train.py --msg 'hello world' '--x=$HOME'"
    assert shlex.split(line) == ["python", "train.py", "--msg", "hello world", "--x=$HOME"]
    assert command_line([], None) == ""


def test_run_time_and_how_its_cost_stands_to_the_bill():
    span = run_time(T0, None, T0 + timedelta(minutes=90))
    assert plain_duration(span) == "1 h 30 min"
    assert run_time(None, None, T0) is None
    assert billing_words("allocation").startswith("billed to the team")
    assert "within what it pays already" in billing_words("quota")
    assert "larger of its use and its grant" in billing_words("max")
    finished = run_time(T0, T0 + timedelta(seconds=70), T0 + timedelta(days=1))
    assert plain_duration(finished) == "1 min 10 s"


def test_no_logs_is_said_in_words_not_the_api_error():
    raw = "the cluster does not serve the logs of pod p (404 the server could not find ...)"
    assert logs_unavailable_message(on_cluster=False, finished=False, detail="x") == (
        "No logs: they appear once the workload's pod has started."
    )
    finished = logs_unavailable_message(
        on_cluster=True, finished=True, detail="workload w has no pod (any more)"
    )
    assert finished == "No logs: the workload has finished and its pods are gone."
    served = logs_unavailable_message(on_cluster=True, finished=False, detail=raw)
    assert "404" not in served and served.startswith("No logs:")


def test_a_pod_on_a_simulated_node_is_said_plainly_not_try_again():
    said = logs_unavailable_message(
        on_cluster=True,
        finished=False,
        detail="pod train-0 runs on a simulated node: a simulated node (...) runs no container",
    )
    assert said.startswith("No logs: A simulated node (the local cluster's KWOK) runs no")
    assert "until the workload is cancelled or stopped at its maximum run time" in said
    assert "try again" not in said
