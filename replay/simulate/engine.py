"""The event loop at trace time: pods arrive, the portal refuses what can never run, Kueue
admits, the scheduler binds, pods run their trace run time and leave; a preempted pod loses
its run so far and waits again in its queue (it restarts from zero, as a Job's pod does).

`Harness` names what the cluster replay adds that is not the policy's; all zero is the
policy's own behaviour (the default here). Deterministic: the only draw (ties inside one
clock tick) is seeded.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from replay.simulate.elastic import Loop
from replay.simulate.kueue import Kueue, Workload
from replay.simulate.scheduler import Pod, Scheduler
from replay.workload import ReplayPod


@dataclass(frozen=True)
class Harness:
    """Effects of the harness, in trace seconds (a wall second at 1,440× is 1,440 of them)."""

    admission_latency_s: float = 0.0  # Kueue admits → the pod runs (quota held meanwhile)
    release_latency_s: float = 0.0  # the pod ends or is evicted → its quota is free again
    requeue_delay_s: float = 0.0  # quota freed → set-aside workloads tried again (Kueue: 1 s)
    cycle_s: float = 0.0  # between Kueue's cycles, one head per queue each; 0: all at once
    clock_resolution_s: float = 0.0  # creationTimestamp's resolution: FIFO ties drawn by seed

    @classmethod
    def cluster_like(cls, compression: float) -> Harness:
        """What UTILISATION.md found on the local cluster, at that compression: 0.2 s each way,
        Kueue's 1 s requeue of inadmissible workloads, whole-second timestamps, ~10 ms cycles."""
        return cls(0.2 * compression, 0.2 * compression, compression, 0.01 * compression,
                   compression)  # fmt: skip


@dataclass(eq=False)
class Job:
    pod: ReplayPod
    team: int
    gpu_eq: float  # GPU-equivalents it holds (compute slices over the GPU's)
    slices: float
    workload: Workload
    kpod: Pod
    started: float | None = None  # its first start
    run_start: float | None = None
    finished: float | None = None
    token: int = 0  # bumped at each bind and eviction: an end event of an old run is stale
    end_token: int = -1
    start_token: int = -1
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    runs: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class Result:
    horizon: float
    fleet_gpus: int
    jobs: int
    refused: int
    never_started: int
    preemptions: int
    alloc_milli: float
    alloc_slices: float
    waits: list[float]  # per job not refused; inf: never started
    lost_gpu_hours: float
    team_held: dict[int, float]  # GPU-equivalents held, time-averaged over the window
    team_demand: dict[int, float]  # … had every pod run when it arrived
    finished_at: float
    in_queue_preemptions: int = 0  # of `preemptions`, by priority within a team; the rest reclaim
    ping_pong: int = 0  # victims the Kueue model held back (`kueue.PING_PONG_LIMIT`)
    reshaped_gpus: int = 0  # GPUs the elastic layouts re-shaped (rows from k)
    asked: list[str] = field(default_factory=list)  # beside `waits`: the resource each pod asked

    def wait(self, q: float) -> float:
        """The q-quantile of queue wait (trace seconds); refused and never started count as
        waiting for ever."""
        waits = sorted(self.waits + [math.inf] * self.refused)
        if not waits:
            return 0.0
        return waits[min(len(waits) - 1, math.ceil(q * len(waits)) - 1)]

    def wait_asking(self, q: float, keep: Callable[[str], bool]) -> float | None:
        """The q-quantile of queue wait over the jobs whose resource `keep` accepts (refused
        ones not counted: they asked nothing of a node); None when there are none."""
        waits = sorted(w for w, r in zip(self.waits, self.asked, strict=True) if keep(r))
        if not waits:
            return None
        return waits[min(len(waits) - 1, math.ceil(q * len(waits)) - 1)]


# event kinds, in the order they are handled at one instant
END, RELEASE, REQUEUE, START, ARRIVE, CYCLE, TICK, UNCORDON = range(8)


class Engine:
    def __init__(
        self,
        jobs: list[Job],
        kueue: Kueue,
        scheduler: Scheduler,
        refuse: Callable[[Job], bool],
        harness: Harness,
        elastic: Loop | None = None,
    ) -> None:
        self.jobs, self.kueue, self.scheduler = jobs, kueue, scheduler
        self.elastic = elastic  # layouts that follow the queue (rows from k), or None
        self.refuse, self.h = refuse, harness
        self.heap: list[tuple[float, int, int, Job | None]] = []
        self.seq = 0
        self.refused: list[Job] = []
        self.running: dict[int, Job] = {}
        self.by_workload = {id(j.workload): j for j in jobs}
        self.by_pod = {id(j.kpod): j for j in jobs}
        self.cycle_due = False
        self.in_queue_preemptions = 0  # by higher priority in the same queue (not reclaim)
        self.retries: set[float] = set()  # times a preemptor waiting out a grace is tried again
        self.uncordon: dict[float, list] = {}  # time -> nodes whose re-shaping ends then

    def at(self, t: float, kind: int, job: Job | None = None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, job))

    def run(self, limit: float, give_up: tuple[float, float] | None = None) -> float:
        """Events up to `limit`. With `give_up` = (wait_s, q), stop as soon as the q-quantile
        of queue wait (`Result.wait`) is sure to exceed wait_s: enough jobs refused, started
        more than wait_s after arriving, or still waiting that long (the carrying-fleet search
        needs no more; the result is then partial: the jobs left count as never started)."""
        for job in self.jobs:
            self.at(job.pod.arrival, ARRIVE, job)
        if self.elastic is not None:
            self.at(self.elastic.settings.period_s, TICK)
        by_arrival = sorted(self.jobs, key=lambda j: j.pod.arrival)
        n = len(self.jobs)
        need = n - max(0, math.ceil(give_up[1] * n) - 1) if give_up else 0  # late jobs that decide
        passed = late = 0  # jobs whose arrival + wait_s is past; those of them waiting longer
        refused_ids: set[int] = set()
        now = 0.0
        while self.heap and self.heap[0][0] <= limit:
            if give_up:
                while passed < n and by_arrival[passed].pod.arrival + give_up[0] < now:
                    job = by_arrival[passed]
                    passed += 1
                    if id(job) in refused_ids:
                        continue
                    if job.started is None or job.started - job.pod.arrival > give_up[0]:
                        late += 1
                if late + len(self.refused) >= need:
                    return now
            now = self.heap[0][0]
            freed = admit = False
            while self.heap and self.heap[0][0] == now:
                _, kind, _, event_job = heapq.heappop(self.heap)
                if kind == CYCLE:
                    self.cycle_due = False
                    self._cycle(now)
                    continue
                if kind == REQUEUE:
                    self.kueue.requeue_inadmissible()
                    admit = True
                    continue
                if kind == TICK:
                    self._tick(now)
                    continue
                if kind == UNCORDON:
                    for node in self.uncordon.pop(now, []):
                        node.cordoned = False
                    freed = True
                    continue
                assert event_job is not None
                job = event_job
                if kind == ARRIVE:
                    if self.refuse(job):
                        self.refused.append(job)
                        refused_ids.add(id(job))
                    else:
                        self.kueue.submit(job.workload)
                        admit = True
                elif kind == END:
                    freed |= self._end(job, now)
                elif kind == RELEASE:
                    self._release(job, now)
                elif kind == START:
                    self._start(job, now)
            if freed:
                for pod in self.scheduler.retry():
                    self._bound(self.by_pod[id(pod)], now)
            if admit or freed:
                self._admit(now)
        return now

    # --- layouts that follow the queue ---------------------------------------------------------

    def _tick(self, now: float) -> None:
        assert self.elastic is not None
        cordoned = self.elastic.tick(now, self.scheduler)
        if cordoned:
            at = now + self.elastic.settings.reconfig_s
            self.uncordon.setdefault(at, []).extend(cordoned)
            self.at(at, UNCORDON)
        if self.heap or self.scheduler.unschedulable:  # work is left: the task runs again
            self.at(now + self.elastic.settings.period_s, TICK)

    # --- Kueue --------------------------------------------------------------------------------

    def _admit(self, now: float) -> None:
        if self.h.cycle_s > 0:
            if not self.cycle_due and self.kueue.pending():
                self.cycle_due = True
                self.at(math.floor(now / self.h.cycle_s + 1) * self.h.cycle_s, CYCLE)
            return
        while any(q.active for q in self.kueue.queues.values()):
            self._cycle(now, chain=False)

    def _cycle(self, now: float, chain: bool = True) -> None:
        decision = self.kueue.cycle(now)
        for w in decision.admitted:
            self._admitted(self.by_workload[id(w)], now)
        for w in decision.preempted:
            self._evict(self.by_workload[id(w)], now)
        self.in_queue_preemptions += decision.in_queue
        t = decision.retry_at
        if t is not None and t > now and t not in self.retries:
            self.retries.add(t)  # the set-aside preemptor is tried again when the grace ends
            self.at(t, REQUEUE, None)
        if chain and any(q.active for q in self.kueue.queues.values()):
            self.cycle_due = True
            self.at(now + self.h.cycle_s, CYCLE)

    def _admitted(self, job: Job, now: float) -> None:
        job.kpod.queued_at = now
        if self.scheduler.submit(job.kpod):
            self._bound(job, now)

    def _release(self, job: Job, now: float) -> None:
        """A finished job's quota back in the cohort; an evicted job's pod off its node (its
        quota went to its preemptor) and the job in its queue again."""
        if job.finished is not None:
            self.kueue.release(job.workload)
        else:
            self.scheduler.remove(job.kpod)
            for pod in self.scheduler.retry():
                self._bound(self.by_pod[id(pod)], now)
            self.kueue.submit(job.workload)
        if self.h.requeue_delay_s > 0:
            self.at(now + self.h.requeue_delay_s, REQUEUE, None)
        else:
            self.kueue.requeue_inadmissible()
            self._admit(now)

    # --- pods ---------------------------------------------------------------------------------

    def _bound(self, job: Job, now: float) -> None:
        job.token += 1
        job.start_token = job.token
        if self.h.admission_latency_s > 0:
            self.at(now + self.h.admission_latency_s, START, job)
        else:
            self._start(job, now)

    def _start(self, job: Job, now: float) -> None:
        if job.kpod.node is None or job.start_token != job.token:
            return  # evicted before it ran
        job.run_start = job.workload.running_since = now
        if job.started is None:
            job.started = now
        self.running[id(job)] = job
        self._end_event(job, now)

    def _end_event(self, job: Job, now: float) -> None:
        self.at(now + job.pod.run, END, job)
        job.end_token = job.token

    def _end(self, job: Job, now: float) -> bool:
        if id(job) not in self.running or job.end_token != job.token:
            return False  # a run that was preempted
        assert job.run_start is not None
        del self.running[id(job)]
        job.runs.append((job.run_start, now))
        job.finished = now
        job.workload.running_since = None
        self.scheduler.remove(job.kpod)
        self._later(now, self.h.release_latency_s, job)
        return True

    def _evict(self, job: Job, now: float) -> None:
        """Preempted: its run so far is lost; its pod leaves after the release latency."""
        job.preemptions += 1
        job.token += 1
        if id(job) in self.running:
            assert job.run_start is not None
            del self.running[id(job)]
            job.runs.append((job.run_start, now))
            job.lost_gpu_s += job.gpu_eq * (now - job.run_start)
        job.run_start = job.workload.running_since = None
        if job.kpod.node is None:
            self.scheduler.remove(job.kpod)  # it never got a node: nothing to wait for
        self._later(now, self.h.release_latency_s, job)

    def _later(self, now: float, delay: float, job: Job) -> None:
        self.at(now + delay, RELEASE, job)  # at 0, still after what this instant handles


def measure(engine: Engine, horizon: float, fleet_gpus: int, slices_per_gpu: int) -> Result:
    """What the window saw: allocation over [0, horizon] of the pods running, waits, losses."""
    milli = slices = 0.0
    held: dict[int, float] = defaultdict(float)
    demand: dict[int, float] = defaultdict(float)
    waits, never, preemptions, lost = [], 0, 0, 0.0
    asked: list[str] = []
    refused = {id(j) for j in engine.refused}
    for job in engine.jobs:
        p = job.pod
        demand[job.team] += job.gpu_eq * max(0.0, min(p.arrival + p.run, horizon) - p.arrival)
        preemptions += job.preemptions
        lost += job.lost_gpu_s
        runs = list(job.runs)
        if id(job) in engine.running and job.run_start is not None:
            runs.append((job.run_start, math.inf))
        for start, end in runs:
            overlap = max(0.0, min(end, horizon) - min(start, horizon))
            milli += p.milli * overlap
            slices += job.slices * overlap
            held[job.team] += job.gpu_eq * overlap
        if id(job) in refused:
            continue
        asked.append(job.kpod.resource)
        if job.started is None:
            never += 1
            waits.append(math.inf)
        else:
            waits.append(job.started - p.arrival)
    span = horizon * fleet_gpus
    return Result(
        horizon=horizon,
        fleet_gpus=fleet_gpus,
        jobs=len(engine.jobs),
        refused=len(refused),
        never_started=never,
        preemptions=preemptions,
        alloc_milli=milli / 1000 / span if span else 0.0,
        alloc_slices=slices / slices_per_gpu / span if span else 0.0,
        waits=waits,
        lost_gpu_hours=lost / 3600,
        team_held={t: v / horizon for t, v in held.items()},
        team_demand={t: v / horizon for t, v in demand.items()},
        finished_at=max((j.finished or 0.0) for j in engine.jobs) if engine.jobs else 0.0,
        in_queue_preemptions=engine.in_queue_preemptions,
        ping_pong=engine.kueue.ping_pong,
        reshaped_gpus=engine.elastic.reshaped if engine.elastic is not None else 0,
        asked=asked,
    )


def tie_order(jobs: list[Job], resolution: float, seed: int) -> None:
    """Queue timestamps at the clock's resolution; jobs in one tick are ordered by a seeded
    draw (concurrent submitters), otherwise by arrival."""
    rng = random.Random(seed)
    for n, job in enumerate(sorted(jobs, key=lambda j: (j.pod.arrival, j.pod.name))):
        w = job.workload
        if resolution > 0:
            w.timestamp = math.floor(job.pod.arrival / resolution) * resolution
            w.seq = rng.randrange(1 << 30)
        else:
            w.timestamp, w.seq = job.pod.arrival, n
