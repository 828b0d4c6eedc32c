"""Idle GPUs given back, in the simulator, from a stated assumption: the trace says how long
each pod held its GPUs, not how much it used them, so row l assumes every run's last
`IDLE_TAIL` is idle (the work done, the GPUs held: a notebook left open, a job waiting on
nothing; the seed article puts idle waiting at 15–25 % of GPU time) and that the portal's idle
policy suspends a workload once it has been idle `suspend_after_s` (its warn-then-suspend
window). A run whose idle tail is shorter than that is untouched; a longer one ends that long
into its tail, and is not resumed (it was done). Everything else is row k's.
"""

from __future__ import annotations

from dataclasses import replace

from replay.workload import Window

IDLE_TAIL = 0.2  # the assumption: the share of each run spent idle, at its end


def given_back(window: Window, suspend_after_s: float, tail: float = IDLE_TAIL) -> Window:
    """The window as the idle policy leaves it: each run cut to its busy part plus the time the
    policy lets it sit idle."""
    if suspend_after_s <= 0:
        return window
    pods = []
    for pod in window.pods:
        busy = pod.run * (1 - tail)
        pods.append(replace(pod, run=min(pod.run, busy + suspend_after_s)))
    return replace(window, pods=pods)


def idle_gpu_hours(window: Window, suspend_after_s: float, tail: float = IDLE_TAIL) -> float:
    """GPU-hours the policy gives back over the window (by requested milli)."""
    cut = given_back(window, suspend_after_s, tail)
    return (
        sum((a.run - b.run) * a.milli / 1000 for a, b in zip(window.pods, cut.pods, strict=True))
        / 3600
    )
