"""The gateway's call counts (pure): exact across threads, and a tally counts its own
thread's calls alone, whatever the others call meanwhile."""

import threading

from scheduler.cluster.kube import CallStats


def test_a_tally_counts_its_own_threads_calls_and_the_total_all_of_them():
    stats = CallStats()
    start = threading.Barrier(4)
    tallies = {}

    def run(n: int) -> None:
        with stats.tally() as mine:
            start.wait()
            for _ in range(2000 * n):
                stats.count("apply", "Namespace")
            stats.count("list", "Namespace")
        tallies[n] = mine

    threads = [threading.Thread(target=run, args=(n,)) for n in (1, 2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert {n: (t.total, t.writes) for n, t in tallies.items()} == {
        n: (2000 * n + 1, 2000 * n) for n in (1, 2, 3, 4)
    }
    assert (stats.total, stats.writes) == (20_004, 20_000)


def test_tallies_nest_and_a_closed_one_counts_no_more():
    stats = CallStats()
    with stats.tally() as outer:
        stats.count("get", "Namespace")
        with stats.tally() as inner:
            stats.count("delete", "Namespace")
    stats.count("get", "Namespace")
    assert (outer.total, outer.writes, inner.total, inner.writes) == (2, 1, 1, 1)
    assert stats.total == 3


def test_closing_an_inner_tally_leaves_an_equal_outer_one_open():
    stats = CallStats()
    with stats.tally() as outer:
        with stats.tally():
            pass  # both empty, so equal as dataclasses
        stats.count("apply", "Namespace")
    assert outer.writes == 1
