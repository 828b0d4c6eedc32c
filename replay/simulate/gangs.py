"""Gangs at trace time: what admitting a multi-node job whole does to allocation and wait, beside
starting its workers one by one (the portal before gangs). Pure, no cluster.

The assumption (the trace has no job id and no multi-node job, so gangs are made, not read):
every trace pod that asks a whole node's GPUs (`gpus_per_node`: the trace's 8-GPU pods) stands
for one worker of a job of `size` such workers (default 2), all arriving with it and running
its trace run time: a gang of `size` pods, each on a node of its own. This adds load (a 2-pod
gang holds twice the pod's GPUs): it is a what-if, "had the 8-GPU jobs been 2-node jobs".
Every other pod is a job of one pod, placed whole on one node (a multi-GPU pod of 2 or 4
GPUs, as the trace ran it). The default window has no 8-GPU pod, so the caller takes the window
of the same length with the most of them (`busiest_end`).

The model isolates gang admission: one queue, no teams, grants or preemption; capacity in
milli-GPUs per node (a pod sharing a GPU holds its `gpu_milli`, GPU boundaries inside a node
ignored: optimistic for shared pods, the same in both modes); pods placed best-fit.
- `whole`: Kueue's batch/job admission with waitForPodsReady, idealised: a job starts when all
  of its pods fit at once; a job that does not fit waits and later ones that fit go first
  (BestEffortFIFO, which can keep a big gang waiting while small jobs pass it). That is
  `blockAdmission: false`, as the portal's Configuration states it; the same in Kueue v0.17
  and v0.19 (v0.19 turns waitForPodsReady on by default, 30 min, only where the Configuration
  says nothing; the portal always states it).
- `split`: each worker starts as soon as it fits by itself; the job computes only once its last
  worker runs, so a started worker holds its GPUs idle until then ("held idle").
Allocation counts GPU-seconds of computing pods over the window's GPU-seconds; wait is from the
job's arrival to its last pod's start.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from replay.workload import ReplayPod

MODES = ("whole", "split")


@dataclass
class GangJob:
    pods: list[ReplayPod]
    arrival: float
    run: float
    gpus: list[int]  # per pod, milli-GPUs
    starts: list[float | None] = field(default_factory=list)
    nodes: list[int | None] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.pods)


def milli(pod: ReplayPod) -> int:
    """What a pod holds of its node, in milli-GPUs (a shared GPU: its share)."""
    return pod.num_gpu * 1000 if not pod.fractional else pod.gpu_milli


def form_gangs(pods: list[ReplayPod], *, gpus_per_node: int, size: int = 2) -> list[GangJob]:
    """The jobs of the assumption above, in arrival order."""
    jobs = []
    for pod in sorted(pods, key=lambda p: (p.arrival, p.name)):
        n = size if pod.num_gpu == gpus_per_node and size > 1 else 1
        jobs.append(GangJob([pod] * n, pod.arrival, pod.run, [milli(pod)] * n))
    for job in jobs:
        job.starts, job.nodes = [None] * job.size, [None] * job.size
    return jobs


def busiest_end(creations: list[int], length: int) -> int | None:
    """The end of the window of `length` holding the most of these arrival times (the latest
    such window), or None when there are none."""
    times = sorted(creations)
    best, best_end, lo = 0, None, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - length:
            lo += 1
        if hi - lo + 1 >= best:
            best, best_end = hi - lo + 1, t + 1
    return best_end


def fit(free: list[int], asks: list[int]) -> list[int] | None:
    """Nodes for every ask at once, best-fit (largest ask first), or None (pure)."""
    left = list(free)
    out: list[int] = [0] * len(asks)
    for i in sorted(range(len(asks)), key=lambda i: -asks[i]):
        fits = [n for n in range(len(left)) if left[n] >= asks[i]]
        if not fits:
            return None
        best = min(fits, key=lambda n: (left[n], n))
        left[best] -= asks[i]
        out[i] = best
    return out


@dataclass(frozen=True)
class GangResult:
    mode: str
    jobs: int
    gangs: int
    gang_pods: int
    alloc: float  # GPU-seconds computing over the window's
    held_idle_gpu_hours: float  # started workers waiting for their last partner (split)
    waits: list[float]  # per job, arrival to its last pod's start; inf: never within the window
    gang_waits: list[float]  # the same, of the gangs only

    def wait(self, q: float) -> float:
        waits = sorted(self.waits)
        return waits[min(len(waits) - 1, math.ceil(q * len(waits)) - 1)] if waits else 0.0


def simulate(jobs: list[GangJob], *, nodes: int, gpus_per_node: int, horizon: float, mode: str):
    """Replay `jobs` on `nodes` × `gpus_per_node` GPUs until `horizon` (trace seconds)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    for job in jobs:
        job.starts, job.nodes = [None] * job.size, [None] * job.size
    free = [gpus_per_node * 1000] * nodes
    waiting: list[GangJob] = []
    ends: list[tuple[float, int, int]] = []  # (time, job index, -) when a job's pods leave
    index = {id(j): i for i, j in enumerate(jobs)}
    busy = idle = 0.0

    def start(job: GangJob, at: float, pods: list[int], where: list[int]) -> None:
        nonlocal busy, idle
        for i, n in zip(pods, where, strict=True):
            free[n] -= job.gpus[i]
            job.nodes[i], job.starts[i] = n, at
        if all(s is not None for s in job.starts):  # the last worker: the job computes
            began = max(s for s in job.starts if s is not None)
            end = began + job.run
            heapq.heappush(ends, (end, index[id(job)], 0))
            for i, s in enumerate(job.starts):
                assert s is not None
                idle += job.gpus[i] / 1000 * (min(began, horizon) - min(s, horizon))
                busy += job.gpus[i] / 1000 * (min(end, horizon) - min(began, horizon))

    def admit(at: float) -> None:
        still = []
        for job in waiting:
            if mode == "whole":
                where = fit(free, job.gpus)
                if where is None:
                    still.append(job)
                    continue
                start(job, at, list(range(job.size)), where)
            else:
                for i in range(job.size):
                    if job.starts[i] is None and (where := fit(free, [job.gpus[i]])) is not None:
                        start(job, at, [i], where)
                if any(s is None for s in job.starts):
                    still.append(job)
        waiting[:] = still

    arrivals = sorted(jobs, key=lambda j: (j.arrival, index[id(j)]))
    k = 0
    while True:
        next_arrival = arrivals[k].arrival if k < len(arrivals) else math.inf
        next_end = ends[0][0] if ends else math.inf
        now = min(next_arrival, next_end)
        if now > horizon or math.isinf(now):
            break
        while ends and ends[0][0] == now:
            _, i, _ = heapq.heappop(ends)
            for p, n in enumerate(jobs[i].nodes):
                assert n is not None
                free[n] += jobs[i].gpus[p]
        while k < len(arrivals) and arrivals[k].arrival == now:
            waiting.append(arrivals[k])
            k += 1
        admit(now)
    # workers of a split gang still holding GPUs for a partner at the horizon
    for job in waiting:
        for i, s in enumerate(job.starts):
            if s is not None:
                idle += job.gpus[i] / 1000 * (horizon - s)
    waits = [
        max(s for s in j.starts if s is not None) - j.arrival
        if all(s is not None for s in j.starts)
        else math.inf
        for j in jobs
    ]
    gangs = [j for j in jobs if j.size > 1]
    span = nodes * gpus_per_node * horizon
    return GangResult(
        mode=mode,
        jobs=len(jobs),
        gangs=len(gangs),
        gang_pods=sum(j.size for j in gangs),
        alloc=busy / span if span else 0.0,
        held_idle_gpu_hours=idle / 3600,
        waits=waits,
        gang_waits=[w for w, j in zip(waits, jobs, strict=True) if j.size > 1],
    )


def table(results: list[GangResult], *, nodes: int, gpus_per_node: int, size: int) -> str:
    """Both modes side by side, with the assumption stated."""

    def minutes(value: float) -> str:
        return "never" if not math.isfinite(value) else f"{value / 60:,.0f}"

    head = (
        f"Gangs (assumed: each {gpus_per_node}-GPU trace pod is one worker of a {size}-node job, "
        f"its gang {size} such pods; replay/simulate/gangs.py), on {nodes}×{gpus_per_node} GPUs, "
        "one queue, no grants or preemption:\n\n"
        "| admission | jobs (gangs, their pods) | allocation | wait p50 / p95 min "
        "| gangs' longest wait, min | never started | GPU-h held idle by part-started gangs "
        "|\n|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r.mode} | {r.jobs} ({r.gangs}, {r.gang_pods}) | {r.alloc:.1%} "
        f"| {minutes(r.wait(0.5))} / {minutes(r.wait(0.95))} "
        f"| {minutes(max(r.gang_waits, default=0.0))} "
        f"| {sum(1 for w in r.waits if not math.isfinite(w))} | {r.held_idle_gpu_hours:,.1f} |"
        for r in results
    ]
    return head + "\n".join(lines) + "\n"
