"""A reference for the rows: the same asks served from one pool of GPU capacity, with no nodes,
no layouts, no quotas and no teams; each waiting ask starts, in arrival order, as soon as the
pool has its size free (first come first served with backfill, as Kueue's BestEffortFIFO lets
a smaller ask pass a larger one that does not fit).

Two sizes per ask: its *shape* (the compute slices of the MIG profile, shared replica or whole
GPUs the policy asks for: what any layout of real GPUs must give it) and its *milli* (exactly
what the trace asked, as a perfectly divisible GPU would give it). What the pool cannot carry,
no policy placing those shapes on real nodes carries either, short of reordering the queue or
preempting: it shows how much of a row's gap is the trace's load and how much the policy's.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from catalog import facts
from replay.workload import Policy, Window, ask


@dataclass(frozen=True)
class Pooled:
    gpus: int
    wait_p95_s: float
    alloc_milli: float


def sizes(window: Window, policy: Policy, model: facts.GpuModel, by: str) -> list[float]:
    """Each pod's size in GPUs: `shape` (the policy's ask) or `milli` (the trace's)."""
    if by == "milli":
        return [p.milli / 1000 for p in window.pods]
    out = []
    for pod in window.pods:
        a = ask(pod, policy, model)
        out.append(a.units * a.slices_per_unit / model.compute_slices)
    return out


def serve(window: Window, size: list[float], gpus: int, quantile: float = 0.95) -> Pooled:
    order = sorted(range(len(window.pods)), key=lambda i: (window.pods[i].arrival, i))
    free = float(gpus)
    ends: list[tuple[float, float]] = []  # (time, size) of the running asks
    queue: list[int] = []
    waits: list[float] = []
    milli = 0.0
    nxt = 0
    while nxt < len(order) or queue:
        arrive = window.pods[order[nxt]].arrival if nxt < len(order) else math.inf
        if ends and ends[0][0] <= arrive:
            now, s = heapq.heappop(ends)
            free += s
        elif nxt < len(order):
            now = arrive
            queue.append(order[nxt])
            nxt += 1
        else:
            break  # asks larger than the pool: never start
        waiting = []
        for i in queue:
            pod = window.pods[i]
            if size[i] <= free + 1e-9:
                free -= size[i]
                waits.append(now - pod.arrival)
                heapq.heappush(ends, (now + pod.run, size[i]))
                milli += pod.milli * max(
                    0.0, min(now + pod.run, window.length) - min(now, window.length)
                )
            else:
                waiting.append(i)
        queue = waiting
    waits += [math.inf] * len(queue)
    waits.sort()
    p95 = waits[min(len(waits) - 1, math.ceil(quantile * len(waits)) - 1)] if waits else 0.0
    span = gpus * window.length
    return Pooled(gpus, p95, milli / 1000 / span if span else 0.0)


def smallest(
    window: Window, size: list[float], gpus_per_node: int, wait_limit_s: float, up_to: int
) -> Pooled | None:
    """The fewest whole nodes' worth of pooled GPUs whose p95 wait is within the limit."""
    for nodes in range(1, up_to + 1):
        result = serve(window, size, nodes * gpus_per_node)
        if result.wait_p95_s <= wait_limit_s:
            return result
    return None
