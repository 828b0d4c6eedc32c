"""What a waiting workload waits behind and when it may start (issue 35, 4): pure."""

from datetime import UTC, datetime, timedelta

from scheduler.workloads.queue.outlook import Ahead, Ending, outlook

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def test_it_names_the_teams_work_ahead_in_queue_order_and_counts_the_rest():
    ahead = [Ahead(f"job-{n}", n) for n in range(8, 0, -1)]
    said = outlook(ahead=ahead, endings=[], holders=0, now=NOW)
    assert said.behind == (
        "job-1 (position 1), job-2 (position 2), job-3 (position 3), job-4 (position 4), "
        "job-5 (position 5), 3 more: the team's work ahead of it in its queue."
    )
    assert outlook(ahead=[], endings=[], holders=0, now=NOW).behind == ""


def test_the_estimate_is_the_first_holder_to_reach_its_maximum_run_time():
    endings = [
        Ending("long", NOW + timedelta(hours=3)),
        Ending("train-a", NOW + timedelta(minutes=30)),
    ]
    said = outlook(ahead=[], endings=endings, holders=3, now=NOW)
    assert said.estimate.startswith("In about 30 min at the latest for the first units: train-a")
    assert "at 12:30 UTC" in said.estimate


def test_without_a_run_limit_there_is_no_estimate_and_it_says_why():
    held = outlook(ahead=[], endings=[], holders=2, now=NOW)
    assert held.estimate.startswith("No estimate: the work holding the team's quota has no max")
    idle = outlook(ahead=[], endings=[], holders=0, now=NOW)
    assert idle.estimate.startswith("No estimate: nothing of the team's runs now")
