"""How the sync reads its watches (pure, over made-up streams): events are handed over in
batches as they arrive, not when the watches end; bookmarks move cursors without being events;
a 410 is raised at once, another failure after the other watches have been read."""

import time

import pytest

from core.errors import TransientClusterError
from scheduler.cluster.kube import ResourceVersionGone
from scheduler.workloads.lifecycle import batches
from scheduler.workloads.lifecycle.batches import Watched as W
from scheduler.workloads.lifecycle.batches import change_batches


def ev(kind: str, rv: str, type_: str = "MODIFIED") -> dict:
    return {"type": type_, "object": {"kind": kind, "metadata": {"resourceVersion": rv}}}


class Streams:
    """Each kind's watch hands out its script: events, pauses (a float: seconds), an error."""

    def __init__(self, **scripts: list) -> None:
        self.scripts = scripts
        self.opened: list[tuple[str, str]] = []

    def stream(self, kind, resource_version, namespace=None, *, timeout_s=3, **_):
        self.opened.append((kind, resource_version))
        for step in self.scripts[kind]:
            if isinstance(step, float):
                time.sleep(step)
            elif isinstance(step, Exception):
                raise step
            else:
                yield step


def test_a_change_is_handed_over_as_it_arrives_not_when_the_watch_ends():
    streams = Streams(Pod=[ev("Pod", "11"), 0.6, ev("Pod", "12")])
    began = time.monotonic()
    batches = change_batches(streams, {"Pod": "10"}, [W("Pod")], timeout_s=3, gather_s=0.1)
    first = next(batches)
    assert time.monotonic() - began < 0.5  # not after the 0.6 s pause
    assert [e["object"]["metadata"]["resourceVersion"] for e in first.events["Pod"]] == ["11"]
    assert first.cursors == {"Pod": "11"}
    assert [b.cursors for b in batches] == [{"Pod": "12"}]


def test_bookmarks_move_the_cursor_and_are_not_events():
    streams = Streams(
        Pod=[ev("Pod", "11", "ADDED")],
        Job=[0.3, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "90"}}}],
    )
    batches = list(
        change_batches(
            streams, {"Pod": "10", "Job": "80"}, [W("Pod"), W("Job")], timeout_s=3, gather_s=0.1
        )
    )
    assert [list(b.events) for b in batches] == [["Pod"], []]
    assert batches[-1].cursors == {"Pod": "11", "Job": "90"}


def test_what_arrives_together_comes_in_one_batch_and_collections_without_cursor_are_not_watched():
    streams = Streams(Pod=[ev("Pod", str(n)) for n in range(11, 31)], Job=[ev("Job", "5")])
    batches = list(
        change_batches(
            streams, {"Pod": "10", "Job": None}, [W("Pod"), W("Job")], timeout_s=3, gather_s=0.1
        )
    )
    assert len(batches) == 1 and len(batches[0].events["Pod"]) == 20
    assert streams.opened == [("Pod", "10")]


def test_a_batch_waits_no_longer_once_every_watch_has_ended():
    streams = Streams(Pod=[ev("Pod", "11")], Job=[ev("Job", "9")])
    began = time.monotonic()
    batches = list(
        change_batches(
            streams, {"Pod": "10", "Job": "8"}, [W("Pod"), W("Job")], timeout_s=3, gather_s=5.0
        )
    )
    assert time.monotonic() - began < 1  # not the 5 s a batch may gather for
    assert [sorted(b.events) for b in batches] == [["Job", "Pod"]]


def test_an_expired_cursor_is_raised_at_once():
    streams = Streams(Pod=[ResourceVersionGone("too old")], Job=[2.0, ev("Job", "9")])
    began = time.monotonic()
    with pytest.raises(ResourceVersionGone):
        list(
            change_batches(
                streams, {"Pod": "1", "Job": "8"}, [W("Pod"), W("Job")], timeout_s=3, gather_s=0.1
            )
        )
    assert time.monotonic() - began < 1.5  # not after the other watch's 2 s


def test_another_failure_comes_after_what_the_other_watches_read():
    streams = Streams(Pod=[TransientClusterError("reset")], Job=[0.2, ev("Job", "9")])
    seen = []
    with pytest.raises(TransientClusterError):
        for batch in change_batches(
            streams, {"Pod": "1", "Job": "8"}, [W("Pod"), W("Job")], timeout_s=3, gather_s=0.1
        ):
            seen.append(batch.cursors)
    assert seen == [{"Pod": "1", "Job": "9"}]


class Openings:
    """Each opening of a kind's watch hands out the next script (events, pauses in seconds);
    after the last, one that ends at once, or with `endless` a change and a 1 s window."""

    def __init__(self, *scripts: list, endless: bool = False) -> None:
        self.scripts, self.endless = list(scripts), endless
        self.opened: list[str] = []

    def stream(self, kind, resource_version, namespace=None, *, timeout_s=3, **_):
        self.opened.append(resource_version)
        after = [ev(kind, str(100 + len(self.opened))), 1.0] if self.endless else []
        for step in self.scripts.pop(0) if self.scripts else after:
            if isinstance(step, float):
                time.sleep(step)
            else:
                yield step


def rvs(batch) -> list[str]:
    return [e["object"]["metadata"]["resourceVersion"] for e in batch.events.get("Pod", [])]


def test_a_watch_that_ends_while_the_caller_is_behind_is_opened_again_from_its_last_cursor():
    streams = Openings([ev("Pod", "11"), 1.0], [ev("Pod", "12"), 1.0])
    seen = []
    for batch in change_batches(streams, {"Pod": "10"}, [W("Pod")], timeout_s=3, gather_s=0.05):
        seen.append(rvs(batch))
        time.sleep(3.0)  # syncing the batch as both first openings end (at 1 and 2 s)
    assert seen == [["11"], ["12"]]  # the second in this run, not after it
    # the third opening ended at once: the server went away, the next run opens it
    assert streams.opened == ["10", "11", "12"]


def test_a_watch_that_ends_while_the_caller_keeps_up_ends_the_run():
    streams = Openings([ev("Pod", "11"), 1.0], [ev("Pod", "12")])
    seen = [rvs(b) for b in change_batches(
        streams, {"Pod": "10"}, [W("Pod")], timeout_s=3, gather_s=0.05)]  # fmt: skip
    assert seen == [["11"]] and streams.opened == ["10"]  # 12 is the next run's


def test_a_caller_always_behind_still_ends_its_run(monkeypatch):
    monkeypatch.setattr(batches, "LONGEST_WINDOWS", 2.5)  # of a 1 s window: 2.5 s
    streams = Openings(endless=True)  # every opening brings a change, then lasts 1 s
    for _ in change_batches(streams, {"Pod": "10"}, [W("Pod")], timeout_s=1, gather_s=0.01):
        time.sleep(1.5)
    assert len(streams.opened) == 3  # at 0, 1 and 2 s; not at 3 s, past the 2.5
