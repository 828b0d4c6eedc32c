"""MultiKueue's objects on the manager, as plain manifests (pure: no I/O, no Django).

A grant that may run on "any cluster of a group" (or on one named worker) is a dispatch
target: one AdmissionCheck (controller `kueue.x-k8s.io/multikueue`) whose parameters name a
MultiKueueConfig listing the target's workers in the platform's order (preference, then name:
v0.19's incremental dispatcher nominates them in `spec.clusters` order). A team's ClusterQueue
on the manager that carries the check (`with_admission_checks`) always dispatches to a worker;
work the manager runs itself goes through queues without it. Each worker is one
MultiKueueCluster whose kubeconfig MultiKueue reads from a Secret in Kueue's namespace, key
`kubeconfig` (`render_kubeconfig_secret` when the platform's Secret lives elsewhere).

Names carry the portal instance, as its Cohort does: two portals sharing a manager never touch
each other's objects. Verified against Kueue v0.19.2's v1beta2 types and CRDs
(`apis/kueue/v1beta2/multikueue_types.go`, `admissioncheck_types.go`, `clusterqueue_types.go`).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.names import dns_label
from scheduler.cluster import credentials
from scheduler.cluster.render.labels import (
    INSTANCE_LABEL,
    KUEUE_API,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    _finish,
)

CONTROLLER = "kueue.x-k8s.io/multikueue"
KUEUE_GROUP = "kueue.x-k8s.io"
MAX_CLUSTERS = 20  # MultiKueueConfig's spec.clusters maxItems (v0.19.2's CRD)
CLUSTER_LABEL = "gpu-portal.io/cluster"  # on a worker's MultiKueueCluster and Secret copy


@dataclass(frozen=True)
class WorkerSpec:
    """A registered worker: `secret` is its kubeconfig Secret's name in Kueue's namespace (the
    platform's own Secret when it is there, else the copy `render_kubeconfig_secret` makes)."""

    name: str
    secret: str
    preference: int = 100
    group: str = ""


@dataclass(frozen=True)
class DispatchTarget:
    """Where a grant's work may run: `name` is its AdmissionCheck's and MultiKueueConfig's."""

    name: str
    workers: tuple[WorkerSpec, ...]


def _prefix(instance: str) -> str:
    return f"gpu-portal-{instance}"


def cluster_object_name(instance: str, cluster: str) -> str:
    """A worker's MultiKueueCluster."""
    return dns_label(f"{_prefix(instance)}-{cluster}")


def secret_copy_name(instance: str, cluster: str) -> str:
    """The copy of a worker's kubeconfig Secret in Kueue's namespace."""
    return dns_label(f"{_prefix(instance)}-{cluster}-kubeconfig")


def group_target_name(instance: str, group: str) -> str:
    """The check of "any cluster of `group`"."""
    return dns_label(f"{_prefix(instance)}-group-{group}")


def worker_target_name(instance: str, cluster: str) -> str:
    """The check of "on worker `cluster`" only."""
    return dns_label(f"{_prefix(instance)}-on-{cluster}")


def in_order(workers: Iterable[WorkerSpec]) -> list[WorkerSpec]:
    """The platform's order: preference (lower first), then name, so the order is total."""
    return sorted(workers, key=lambda w: (w.preference, w.name))


def _labels(instance: str, cluster: str = "") -> dict:
    labels = {MANAGED_BY_LABEL: MANAGED_BY, INSTANCE_LABEL: instance}
    if cluster:
        labels[CLUSTER_LABEL] = cluster
    return labels


def render_admission_check(name: str, instance: str) -> dict:
    return _finish(
        {
            "apiVersion": KUEUE_API,
            "kind": "AdmissionCheck",
            "metadata": {"name": name, "labels": _labels(instance)},
            "spec": {
                "controllerName": CONTROLLER,
                "parameters": {"apiGroup": KUEUE_GROUP, "kind": "MultiKueueConfig", "name": name},
            },
        }
    )


def render_multikueue_config(name: str, workers: Sequence[WorkerSpec], instance: str) -> dict:
    """The target's workers in the platform's order. Raises ValueError for none, for a name
    twice (the CRD refuses duplicates) or for more than MultiKueue takes."""
    names = [cluster_object_name(instance, w.name) for w in in_order(workers)]
    if not names:
        raise ValueError(f"{name}: no worker to dispatch to; register one or drop the target")
    if len(set(names)) != len(names):
        raise ValueError(f"{name}: a worker is listed twice ({', '.join(names)})")
    if len(names) > MAX_CLUSTERS:
        raise ValueError(f"{name}: {len(names)} workers, MultiKueue takes at most {MAX_CLUSTERS}")
    return _finish(
        {
            "apiVersion": KUEUE_API,
            "kind": "MultiKueueConfig",
            "metadata": {"name": name, "labels": _labels(instance)},
            "spec": {"clusters": names},
        }
    )


def render_multikueue_cluster(worker: WorkerSpec, instance: str) -> dict:
    return _finish(
        {
            "apiVersion": KUEUE_API,
            "kind": "MultiKueueCluster",
            "metadata": {
                "name": cluster_object_name(instance, worker.name),
                "labels": _labels(instance, worker.name),
            },
            "spec": {
                "clusterSource": {
                    "kubeConfig": {"locationType": "Secret", "location": worker.secret}
                }
            },
        }
    )


def render_kubeconfig_secret(
    cluster: str, kubeconfig: str, *, namespace: str, instance: str
) -> dict:
    """A worker's kubeconfig where MultiKueue reads it (Kueue's namespace, key `kubeconfig`),
    for a platform Secret kept elsewhere. Raises `credentials.BadKubeconfig` (what to change)
    for one MultiKueue would refuse, so a refused kubeconfig is never written."""
    credentials.check_kubeconfig(kubeconfig)
    return _finish(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": secret_copy_name(instance, cluster),
                "namespace": namespace,
                "labels": _labels(instance, cluster),
            },
            "type": "Opaque",
            "data": {credentials.SECRET_KEY: base64.b64encode(kubeconfig.encode()).decode()},
        }
    )


def admission_checks_strategy(checks: Iterable[str]) -> dict:
    """A ClusterQueue's `spec.admissionChecksStrategy` for these checks (for every flavor)."""
    return {"admissionChecks": [{"name": name} for name in sorted(set(checks))]}


def with_admission_checks(cluster_queue: dict, checks: Iterable[str]) -> dict:
    """A copy of a rendered ClusterQueue that dispatches through these checks (none: as it
    was, without a strategy: the manager runs the work itself), its hash made again."""
    out = copy.deepcopy(cluster_queue)
    names = sorted(set(checks))
    out["spec"].pop("admissionChecksStrategy", None)
    if names:
        out["spec"]["admissionChecksStrategy"] = admission_checks_strategy(names)
    return _finish(out)


def render_manager(targets: Sequence[DispatchTarget], instance: str) -> list[dict]:
    """Every MultiKueue object of the manager: each worker any target names (once), then each
    target's AdmissionCheck and MultiKueueConfig, in name order."""
    workers = {w.name: w for t in targets for w in t.workers}
    out = [render_multikueue_cluster(workers[name], instance) for name in sorted(workers)]
    for target in sorted(targets, key=lambda t: t.name):
        out.append(render_admission_check(target.name, instance))
        out.append(render_multikueue_config(target.name, target.workers, instance))
    return out
