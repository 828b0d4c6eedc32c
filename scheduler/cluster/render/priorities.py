"""The cluster-wide priority classes: Kubernetes' PriorityClasses for pods and Kueue's
WorkloadPriorityClasses (same names and values) for queue order and preemption."""

from __future__ import annotations

from scheduler.cluster.render.labels import KUEUE_API, MANAGED_BY, MANAGED_BY_LABEL, _finish
from scheduler.cluster.render.specs import PriorityClassSpec


def render_workload_priority_classes(classes: list[PriorityClassSpec]) -> list[dict]:
    """Kueue's queue order and preemption follow these (same names and values as the pods')."""
    return [
        _finish(
            {
                "apiVersion": KUEUE_API,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": pc.name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
                "value": pc.value,
                **({"description": pc.description} if pc.description else {}),
            }
        )
        for pc in classes
    ]


def render_priority_classes(classes: list[PriorityClassSpec]) -> list[dict]:
    return [
        _finish(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": pc.name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
                "value": pc.value,  # globalDefault stays unset (false): none is the default
                "preemptionPolicy": pc.preemption_policy,
                # the API server drops an empty description: rendering one would never match
                **({"description": pc.description} if pc.description else {}),
            }
        )
        for pc in classes
    ]
