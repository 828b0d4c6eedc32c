"""The submit's check of a gang's topology ask (`topology.py`): a level the settings name, a
gang to place, and, for "all in one <level>", a domain of the model's nodes (the inventory)
that could ever hold every pod. Bad input is a 400 that says what to ask instead."""

from __future__ import annotations

from django.conf import settings

from catalog.models import ResourceClass
from core.errors import InvalidInput
from scheduler.cluster.models import Node
from scheduler.workloads.kinds import topology


def check_topology(
    value: str | None, *, kind: str, pods: int, asked: list[tuple[ResourceClass, int]]
) -> str:
    """The ask as stored ("" for none)."""
    levels = settings.GPU_TOPOLOGY_LEVELS
    try:
        placement = topology.parse(value or "", levels)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="topology", code="unknown_topology") from None
    if placement is None:
        return ""
    if kind != "job" or pods < 2:
        raise InvalidInput(
            "topology places a gang's pods together: ask for 2 or more pods, or topology none",
            field="topology",
        )
    model = asked[0][0].gpu_model
    nodes = Node.objects.filter(gpu_model=model, cluster__archived_at__isnull=True)
    per_pod = {rc.resource_name: units for rc, units in asked}
    capacity = topology.domain_capacity(
        ((n.labels or {}, n.allocatable or {}) for n in nodes), placement.key, per_pod
    )
    said = topology.domain_refusal(placement, pods, capacity, model)
    if said:
        raise InvalidInput(said, field="topology", code="topology_too_small")
    return f"{placement.level}-{'required' if placement.required else 'preferred'}"
