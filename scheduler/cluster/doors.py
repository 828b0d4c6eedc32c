"""The door to each registered cluster, by name: the home cluster (standalone or manager) is the
process's one gateway (`kube.gateway()`, unchanged for every existing caller); a worker's is
a gateway of its own, built from the kubeconfig in its Secret on the manager and kept per
process, so its connection pool and support verdict live as long as its credentials do.

The Secret is read again every `SECRET_TTL_S`: a rotated kubeconfig takes effect within that
time, and the same one keeps the same gateway. Nothing here imports the Kubernetes client.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass

from core.errors import ClusterError, PermanentClusterError
from scheduler.cluster import credentials, kube
from scheduler.cluster.models import DEFAULT_CLUSTER, Cluster

SECRET_TTL_S = 300.0


class CredentialsProblem(PermanentClusterError):
    """The worker's kubeconfig Secret is missing, unreadable or refused: what to change."""


@dataclass
class _Door:
    fingerprint: str  # of the kubeconfig text ("" for the home cluster)
    read_at: float  # monotonic
    gateway: kube.KubeGateway | None  # None: the home cluster's, `kube.gateway()`


_doors: dict[str, _Door] = {}
_lock = threading.Lock()


def door(cluster_name: str = DEFAULT_CLUSTER) -> kube.KubeGateway:
    """The gateway to the named cluster. Raises `PermanentClusterError` for a name that is not
    registered (or archived) and `CredentialsProblem` for a worker whose Secret will not do."""
    now = time.monotonic()
    with _lock:
        cached = _doors.get(cluster_name)
    if cached is not None and now - cached.read_at < SECRET_TTL_S:
        return cached.gateway or kube.gateway()
    cluster = Cluster.objects.filter(name=cluster_name).first()
    if cluster is None and cluster_name != DEFAULT_CLUSTER:
        raise PermanentClusterError(f"no cluster {cluster_name!r} is registered")
    if cluster is not None and cluster.archived_at is not None:
        raise PermanentClusterError(f"cluster {cluster_name!r} is archived")
    if cluster is None or cluster.is_home:
        fresh = _Door("", now, None)
    else:
        text = kubeconfig_text(cluster)
        fingerprint = hashlib.sha256(text.encode()).hexdigest()
        if cached is not None and cached.fingerprint == fingerprint:
            fresh = _Door(fingerprint, now, cached.gateway)
        else:
            fresh = _Door(fingerprint, now, kube.KubeGateway.from_kubeconfig_text(text))
    with _lock:
        _doors[cluster_name] = fresh
    return fresh.gateway or kube.gateway()


def kubeconfig_text(cluster: Cluster) -> str:
    """The worker's kubeconfig text, read through the home cluster's door and checked."""
    where = cluster.credentials_secret
    try:
        secret = kube.gateway().get(
            "Secret", cluster.credentials_secret_name, cluster.credentials_secret_namespace
        )
    except ClusterError as exc:
        raise CredentialsProblem(
            f"cluster {cluster.name}: cannot read its kubeconfig Secret {where} on the manager "
            f"({exc}); the portal's account needs `get` on that Secret"
        ) from exc
    try:
        text = credentials.kubeconfig_of_secret(secret, where)
        credentials.check_kubeconfig(text)
    except credentials.BadKubeconfig as exc:
        raise CredentialsProblem(f"cluster {cluster.name}: {exc}") from exc
    return text


def forget(cluster_name: str | None = None) -> None:
    """Drop the cached door of one cluster (all with None): its next use reads it again."""
    with _lock:
        if cluster_name is None:
            _doors.clear()
        else:
            _doors.pop(cluster_name, None)
