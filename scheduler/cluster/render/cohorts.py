"""Kueue's hierarchical cohorts: one Cohort per department, under the organisation's cohort (the
portal instance's, which every team's ClusterQueue was in before departments).

A team in a department has its ClusterQueue in the department's Cohort. Kueue counts a queue's
use above its own quota against its department's subtree first (the department's teams'
nominal quota together) and only then against the organisation's: a team borrows its sister
teams' idle units before any unit of another department (`resource_node.go`: usage bubbles up
past each node's local quota). The Cohort adds no quota of its own (nominal 0: the cluster
never admits more than what is granted); per GPU model it carries the department's
`lendingLimit` (how many of its idle slices other departments may borrow) and
`borrowingLimit` (how many it may borrow from them). Limits are counted in GPU slices, so they
are rendered only while quotas are (GPU_QUOTA_UNIT=slices). Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.cluster.render.labels import (
    DISPLAY_NAME_ANNOTATION,
    INSTANCE_LABEL,
    KUEUE_API,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    _finish,
)

DEPARTMENT_LABEL = "gpu-portal.io/department"


@dataclass(frozen=True)
class CohortLine:
    flavor: str
    resource_name: str
    lending_limit: int | None  # None: lends all its idle units
    borrowing_limit: int | None  # None: borrows what the organisation leaves idle


@dataclass(frozen=True)
class DepartmentSpec:
    slug: str
    name: str
    cohort: str  # its Cohort's name
    parent: str  # the organisation's cohort
    instance: str
    lines: tuple[CohortLine, ...] = ()


def _quota(line: CohortLine) -> dict:
    quota: dict = {"name": line.resource_name, "nominalQuota": "0"}
    if line.lending_limit is not None:
        quota["lendingLimit"] = str(line.lending_limit)
    if line.borrowing_limit is not None:
        quota["borrowingLimit"] = str(line.borrowing_limit)
    return quota


def render_cohort(spec: DepartmentSpec) -> dict:
    # A line with no limit says nothing Kueue's defaults do not; one group per resource (the
    # slices), each flavor listing it alone, as Kueue wants every flavor of a group to list
    # every covered resource.
    limited = [
        line
        for line in spec.lines
        if line.lending_limit is not None or line.borrowing_limit is not None
    ]
    body: dict = {"parentName": spec.parent}
    groups = [
        {
            "coveredResources": [name],
            "flavors": [
                {"name": line.flavor, "resources": [_quota(line)]}
                for line in sorted(limited, key=lambda x: x.flavor)
                if line.resource_name == name
            ],
        }
        for name in sorted({line.resource_name for line in limited})
    ]
    if groups:
        body["resourceGroups"] = groups
    return _finish(
        {
            "apiVersion": KUEUE_API,
            "kind": "Cohort",
            "metadata": {
                "name": spec.cohort,
                "labels": {
                    MANAGED_BY_LABEL: MANAGED_BY,
                    INSTANCE_LABEL: spec.instance,
                    DEPARTMENT_LABEL: spec.slug,
                },
                "annotations": {DISPLAY_NAME_ANNOTATION: spec.name},
            },
            "spec": body,
        }
    )


def render_cohorts(specs: list[DepartmentSpec]) -> list[dict]:
    return [render_cohort(spec) for spec in sorted(specs, key=lambda s: s.cohort)]
