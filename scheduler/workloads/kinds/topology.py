"""Where a gang's pods may land in the data centre's network: "all in one rack" (required) or "as
close as possible" (preferred), asked as `<level>-required` / `<level>-preferred` where the
levels are the node labels the platform team names (setting GPU_TOPOLOGY_LEVELS, e.g. block
and rack). Pure, but for `domain_capacity`'s caller reading the node inventory.

The mechanism is the kube-scheduler's inter-pod affinity, with the level's node label as its
topology key and the gang's own pods as its selector: the first pod lands anywhere, every other
one only in the domain of a pod of the gang already placed (required) or there if it can
(preferred). Kueue still admits the gang whole by quota; a required gang that is admitted but
cannot all fit the first pod's rack stays short of ready pods and `waitForPodsReady` evicts and
requeues it whole. Kueue's own Topology Aware Scheduling would place it at admission instead,
but a TAS flavor admits only workloads that ask for topology and a TAS pod set needs one flavor
for all its resources, cpu and memory included, which the portal's queues keep on a separate
flavor (docs/distributed.md, "Topology").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL

MODES = ("required", "preferred")
NONE = ("", "none")


@dataclass(frozen=True)
class Placement:
    level: str  # e.g. "rack"
    key: str  # its node label
    required: bool


def parse(value: str, levels: Mapping[str, str]) -> Placement | None:
    """`value` ("rack-required", "block-preferred", "" or "none") against the configured
    `levels` (name -> node label); ValueError saying what to ask instead."""
    value = (value or "").strip()
    if value in NONE:
        return None
    level, _, mode = value.rpartition("-")
    choices = choices_for(levels)
    if mode not in MODES or level not in levels:
        said = ", ".join(choices) if len(choices) > 1 else "none: this cluster names no levels"
        raise ValueError(f"topology {value!r} is not one of: {said}")
    return Placement(level=level, key=levels[level], required=mode == "required")


def choices_for(levels: Mapping[str, str]) -> list[str]:
    return ["none", *(f"{level}-{mode}" for level in levels for mode in MODES)]


def pod_affinity(placement: Placement, workload_id: int) -> dict:
    """The pod affinity that keeps a gang's pods in one domain of `placement`'s level."""
    term = {
        "labelSelector": {"matchLabels": {WORKLOAD_LABEL: str(workload_id)}},
        "topologyKey": placement.key,
    }
    if placement.required:
        return {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    return {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}
        ]
    }


def domain_capacity(
    nodes: Iterable[tuple[Mapping[str, str], Mapping[str, int]]],
    key: str,
    per_pod: Mapping[str, int],
) -> dict[str, int]:
    """How many pods of `per_pod` (resource -> units) each domain of node label `key` holds in
    all, from (labels, allocatable) of the model's nodes; nodes without the label are in none."""
    out: dict[str, int] = {}
    for labels, allocatable in nodes:
        domain = labels.get(key)
        if not domain:
            continue
        fits = min((int(allocatable.get(r, 0)) // n for r, n in per_pod.items() if n), default=0)
        out[domain] = out.get(domain, 0) + fits
    return out


def domain_refusal(placement: Placement, pods: int, capacity: Mapping[str, int], model: str):
    """Why a gang of `pods` can never run in one domain (required only), else None."""
    if not placement.required:
        return None
    if not capacity:
        return (
            f"no {model} node carries the {placement.level} label {placement.key}: ask for "
            "topology none, or the platform team labels the nodes"
        )
    biggest, most = max(capacity.items(), key=lambda kv: (kv[1], kv[0]))
    if pods <= most:
        return None
    return (
        f"{pods} pods must share one {placement.level}, but the largest {model} "
        f"{placement.level} ({biggest}) holds {most} pods of this shape: ask for at most "
        f"{most} pods, a smaller shape, or {placement.level}-preferred"
    )


def domain_of(labels: Mapping[str, str], levels: Mapping[str, str]) -> str:
    """A node's place as "block-a / rack-a1" (the configured levels it carries, widest first)."""
    return " / ".join(labels[key] for key in levels.values() if labels.get(key))
