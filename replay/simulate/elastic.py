"""Layouts that follow the queue, in the simulator: the portal's own decision
(`scheduler.mig.elastic.decide`) run every `period_s` of trace time over the scheduler
model's GPUs, as the periodic task runs it over the inventory.

What waits for a shape is what Kueue admitted and the scheduler could not place (the pods a
layout change can serve: they hold quota already). A change re-shapes idle GPUs only; its node is
cordoned for `reconfig_s` (the rollout's cordon while the MIG manager re-creates the instances
and the device plugin re-advertises), then the pods that wait are tried again. The disruption
budget counts GPUs re-shaped in the rolling hour before each tick.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cache

from catalog import facts
from catalog.services import catalog_resource_classes
from replay.simulate.scheduler import Node, Scheduler
from scheduler.mig import elastic, planner

HOUR_S = 3600.0


@dataclass(frozen=True)
class Settings:
    policy: elastic.ElasticPolicy = elastic.ElasticPolicy()
    period_s: float = 60.0  # the periodic task's beat
    reconfig_s: float = 120.0  # a node cordoned while its GPUs are re-shaped


@cache
def _slugs(model_key: str) -> dict[str, str]:
    model = facts.get_model(model_key)
    return {c["resource_name"]: c["slug"] for c in catalog_resource_classes(model)}


class Loop:
    def __init__(self, model: facts.GpuModel, settings: Settings) -> None:
        self.model, self.settings = model, settings
        self.recent: deque[tuple[float, int]] = deque()  # (time, GPUs re-shaped)
        self.reshaped = 0  # GPUs re-shaped in all
        self.reasons: list[str] = []

    def tick(self, now: float, sched: Scheduler) -> list[Node]:
        """One run of the task: the nodes it cordoned (the engine uncordons them later)."""
        if not sched.unschedulable:
            return []
        while self.recent and self.recent[0][0] <= now - HOUR_S:
            self.recent.popleft()
        slugs = _slugs(self.model.key)
        gpus = []
        for node in sched.nodes:
            for g in node.gpus:
                busy = tuple(sorted((slugs[r], n) for r, n in g.used.items() if n > 0))
                gpus.append(planner.GpuState(node.name, g.index, self.model.key, g.shape, busy))
        waiting = [
            elastic.WaitingAsk(slugs[p.resource], p.units, now - p.queued_at)
            for p in sched.unschedulable
        ]
        free_nodes = frozenset(n.name for n in sched.nodes if not n.cordoned)
        decision = elastic.decide(
            gpus, waiting, self.settings.policy, sum(n for _, n in self.recent), free_nodes
        )
        if not decision.changes:
            return []
        by_name = {n.name: n for n in sched.nodes}
        cordoned = []
        for change in decision.changes:
            node = by_name[change.node]
            node.reshape(self.model, change.index, change.after)
            if not node.cordoned:
                node.cordoned = True
                cordoned.append(node)
        self.recent.append((now, len(decision.changes)))
        self.reshaped += len(decision.changes)
        self.reasons.append(decision.reason(self.model))
        return cordoned
