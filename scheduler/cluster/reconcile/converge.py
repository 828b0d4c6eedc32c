"""Desired vs live: compare what render wants with what the API server has, apply only what
differs (a no-op run writes nothing), prune what this portal instance labelled and no longer
wants, and tell drift (a hand edit, a deletion outside the portal) from change.

`plan_converge` is pure; `execute` and `converge` call the API server through the gateway.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings

from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.render.labels import (
    HASH_ANNOTATION,
    INSTANCE_LABEL,
    KEEP_BINDING_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    object_key,
)

MANAGED = f"{MANAGED_BY_LABEL}={MANAGED_BY}"


def managed_selector() -> str:
    """What this portal instance owns (several may share one cluster)."""
    return f"{MANAGED},{INSTANCE_LABEL}={settings.PORTAL_INSTANCE}"


def key_str(manifest: dict) -> str:
    kind, ns, name = object_key(manifest)
    return f"{kind}/{ns}/{name}" if ns else f"{kind}/{name}"


def matches(desired: dict, live: dict) -> bool:
    """Live has our labels and annotations and exactly our content (the API server's own
    additions such as status or extra metadata are ignored)."""
    d_meta, l_meta = desired["metadata"], live.get("metadata", {})
    for part in ("labels", "annotations"):
        live_part = l_meta.get(part) or {}
        if any(live_part.get(k) != v for k, v in (d_meta.get(part) or {}).items()):
            return False
    same = _contained if desired.get("apiVersion", "").startswith(DEFAULTED_GROUPS) else _equal
    return all(
        same(v, live.get(k))
        for k, v in desired.items()
        if k not in ("metadata", "kind", "apiVersion")
    )


# API groups whose objects the API server (or Kueue's webhooks) fill with defaults.
DEFAULTED_GROUPS = ("kueue.x-k8s.io/", "admissionregistration.k8s.io/")


def _equal(desired, live) -> bool:
    return desired == live


def _contained(desired, live) -> bool:
    """Desired is live less what the API server defaulted: Kueue's CRDs and webhooks fill in
    fields we leave out (flavorFungibility, preemption defaults…), admission policies get a
    matchPolicy and empty selectors; none of that is drift."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            _contained(v, live.get(k)) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(_contained(d, v) for d, v in zip(desired, live, strict=True))
        )
    return desired == live


@dataclass
class Outcome:
    changes: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    applied: dict[str, str] = field(default_factory=dict)


@dataclass
class ConvergePlan:
    """What a converge would do, computed without calling the API server (pure)."""

    to_apply: list[dict] = field(default_factory=list)
    to_delete: list[dict] = field(default_factory=list)
    outcome: Outcome = field(default_factory=Outcome)

    @property
    def is_noop(self) -> bool:
        return not (self.to_apply or self.to_delete)


def plan_converge(
    desired: list[dict],
    live: Iterable[dict],
    previously_applied: dict[str, str],
    *,
    prune: bool = True,
) -> ConvergePlan:
    plan = ConvergePlan()
    out = plan.outcome
    live_by_key = {key_str(obj): obj for obj in live}
    for manifest in desired:
        key = key_str(manifest)
        want_hash = manifest["metadata"]["annotations"][HASH_ANNOTATION]
        current = live_by_key.pop(key, None)
        out.applied[key] = want_hash
        if current is not None and matches(manifest, current):
            continue
        if current is None:
            if previously_applied.get(key) == want_hash:
                out.drift.append(f"{key}: deleted outside the portal")
            out.changes.append(f"{key}: created")
        else:
            live_hash = (current["metadata"].get("annotations") or {}).get(HASH_ANNOTATION)
            if live_hash == want_hash:
                out.drift.append(f"{key}: edited outside the portal")
            out.changes.append(f"{key}: updated")
        plan.to_apply.append(manifest)
    if prune:
        plan.to_delete = [obj for obj in live_by_key.values() if not _terminating(obj)]
        for obj in plan.to_delete:
            if not is_managed(obj):
                out.drift.append(f"{key_str(obj)}: access granted outside the portal")
    return plan


def is_managed(obj: dict) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return (
        labels.get(MANAGED_BY_LABEL) == MANAGED_BY
        and labels.get(INSTANCE_LABEL) == settings.PORTAL_INSTANCE
    )


def is_foreign_binding(obj: dict) -> bool:
    """A RoleBinding in a tenant namespace that the portal did not render: pruned (access is
    granted through the portal), unless the platform team labelled it to keep."""
    labels = obj["metadata"].get("labels") or {}
    return not is_managed(obj) and labels.get(KEEP_BINDING_LABEL) != "true"


def execute(kube: KubeGateway, plan: ConvergePlan) -> Outcome:
    for manifest in plan.to_apply:
        kube.apply(manifest)
    for obj in plan.to_delete:
        kind, ns, name = object_key(obj)
        if kube.delete(kind, name, ns or None):
            plan.outcome.changes.append(f"{key_str(obj)}: deleted")
    return plan.outcome


def converge(
    kube: KubeGateway,
    desired: list[dict],
    live: Iterable[dict],
    previously_applied: dict[str, str],
    *,
    prune: bool = True,
) -> Outcome:
    """Apply what differs, delete what we own and no longer want, and classify drift."""
    return execute(kube, plan_converge(desired, live, previously_applied, prune=prune))


def _terminating(obj: dict) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))
