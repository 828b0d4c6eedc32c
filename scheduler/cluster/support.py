"""Which clusters the portal can serve: the Kubernetes and Kueue versions it is tested on and
supports, judged from what the cluster says of itself (the server's `/version`; Kueue has no
version endpoint, so its ClusterQueue CRD's served versions and fields).

Below the floor the portal refuses to write to the cluster (`SupportCheck.require`, called by the
Kubernetes door before every write and by the reconciler before every run) and says what to
upgrade: a console banner, a `/readyz` reason and a log line. What it cannot tell (a CRD it may
not read, a version newer than tested) is a warning, never a refusal.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.core.cache import cache

from core.errors import PermanentClusterError

log = logging.getLogger(__name__)

# What the suite runs on (localcluster/build.py builds exactly these) and what is supported.
TESTED_KUBERNETES = "v1.36.3"
TESTED_KUEUE = "v0.19.2"
KUBERNETES_FLOOR = (1, 35)
KUBERNETES_CEILING = (1, 36)  # 1.37 joins once the suite passes on it
KUEUE_FLOOR = "0.18"
SUPPORTED_KUBERNETES = "1.35–1.36"
SUPPORTED_KUEUE = "0.18–0.19"

# Kueue's version, from what it serves: its ClusterQueue CRD serves and stores v1beta2 (the only
# version the portal writes), and `spec.concurrentAdmissionPolicy` is new in v0.18 (compared
# across the published CRDs of v0.17.0, v0.18.1 and v0.19.2; v0.19 added no field over v0.18).
KUEUE_PROBE_CRD = "clusterqueues.kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_FLOOR_FIELD = "concurrentAdmissionPolicy"

CHECK_TTL_S = 300.0  # a downgraded (or replaced) cluster is noticed within five minutes
REFUSED_TTL_S = 15.0  # a refused one is read again sooner: its upgrade is served at once
CACHE_KEY = "cluster-support"  # the last verdict, for the console banner (any process)

_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


class UnsupportedCluster(PermanentClusterError):
    """The cluster is below what the portal supports: nothing is written to it."""


@dataclass(frozen=True)
class Verdict:
    kubernetes: str  # what the API server says, e.g. "v1.36.3"
    kueue: str  # what its CRDs say, e.g. "0.18 or newer"
    refusal: str = ""  # what to upgrade, when the portal cannot serve this cluster
    warnings: tuple[str, ...] = ()

    @property
    def supported(self) -> bool:
        return not self.refusal

    def as_dict(self) -> dict:
        return {
            "kubernetes": self.kubernetes,
            "kueue": self.kueue,
            "supported": self.supported,
            "refusal": self.refusal,
            "warnings": list(self.warnings),
        }


def kubernetes_minor(git_version: str) -> tuple[int, int] | None:
    match = _VERSION.match(git_version or "")
    return (int(match[1]), int(match[2])) if match else None


def _v1beta2_schema(crd: dict) -> dict | None:
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") == KUEUE_VERSION and version.get("served"):
            return ((version.get("schema") or {}).get("openAPIV3Schema")) or {}
    return None


def judge(git_version: str, kueue_crd: dict | None, crd_readable: bool = True) -> Verdict:
    """The verdict on a cluster from its `/version` and Kueue's ClusterQueue CRD (pure).
    `kueue_crd` None: not installed; `crd_readable` False: the portal may not read it."""
    refusals: list[str] = []
    warnings: list[str] = []
    minor = kubernetes_minor(git_version)
    if minor is None:
        warnings.append(
            f"The API server's version {git_version!r} cannot be read; the portal is tested on "
            f"Kubernetes {TESTED_KUBERNETES} and supports {SUPPORTED_KUBERNETES}."
        )
    elif minor < KUBERNETES_FLOOR:
        floor = ".".join(map(str, KUBERNETES_FLOOR))
        refusals.append(
            f"Kubernetes {git_version} is older than {floor}: upgrade the cluster to Kubernetes "
            f"{floor} or newer (tested: {TESTED_KUBERNETES})."
        )
    elif minor > KUBERNETES_CEILING:
        warnings.append(
            f"Kubernetes {git_version} is newer than the portal is tested on "
            f"({TESTED_KUBERNETES}; supported {SUPPORTED_KUBERNETES})."
        )

    if not crd_readable:
        kueue = "unknown"
        warnings.append(
            f"Kueue's version cannot be told: the portal may not read the CRD {KUEUE_PROBE_CRD} "
            "(the chart's ClusterRole grants it)."
        )
    elif kueue_crd is None:
        kueue = "not installed"
        refusals.append(
            f"Kueue is not installed (no {KUEUE_PROBE_CRD}): install Kueue {TESTED_KUEUE} "
            f"(supported {SUPPORTED_KUEUE}) with the Configuration `manage.py kueue_config` prints."
        )
    else:
        schema = _v1beta2_schema(kueue_crd)
        spec = ((schema or {}).get("properties") or {}).get("spec") or {}
        if schema is None:
            kueue = "older than 0.15"
            refusals.append(
                f"Kueue does not serve {KUEUE_VERSION}: upgrade Kueue to {TESTED_KUEUE} "
                f"(supported {SUPPORTED_KUEUE})."
            )
        elif KUEUE_FLOOR_FIELD not in (spec.get("properties") or {}):
            kueue = f"older than {KUEUE_FLOOR}"
            refusals.append(
                f"Kueue is older than {KUEUE_FLOOR} (its ClusterQueue has no "
                f"spec.{KUEUE_FLOOR_FIELD}): upgrade Kueue to {TESTED_KUEUE} "
                f"(supported {SUPPORTED_KUEUE})."
            )
        else:
            kueue = f"{KUEUE_FLOOR} or newer"
    return Verdict(git_version, kueue, " ".join(refusals), tuple(warnings))


def remember(verdict: Verdict) -> None:
    cache.set(CACHE_KEY, verdict.as_dict(), timeout=int(CHECK_TTL_S * 4))


def remembered() -> dict | None:
    """The last verdict any process reached (None if none is known): pages read this and never
    ask the cluster themselves."""
    return cache.get(CACHE_KEY)


class SupportCheck:
    """One gateway's verdict, read at its first write and again after `CHECK_TTL_S` (after
    `REFUSED_TTL_S` while it refuses).
    `read` returns (`/version`'s gitVersion, the CRD or None, whether the CRD was readable)."""

    def __init__(self, read: Callable[[], tuple[str, dict | None, bool]]):
        self._read = read
        self._lock = threading.Lock()
        self._verdict: Verdict | None = None
        self._until = float("-inf")

    def verdict(self, *, fresh: bool = False) -> Verdict:
        with self._lock:
            if fresh or self._verdict is None or time.monotonic() >= self._until:
                verdict = judge(*self._read())
                if verdict != self._verdict:  # said once per change, not every five minutes
                    if verdict.refusal:
                        log.error("cluster not supported, nothing is written: %s", verdict.refusal)
                    for warning in verdict.warnings:
                        log.warning("cluster support: %s", warning)
                ttl = REFUSED_TTL_S if verdict.refusal else CHECK_TTL_S
                self._verdict, self._until = verdict, time.monotonic() + ttl
                remember(verdict)
            return self._verdict

    def require(self) -> None:
        """Raise `UnsupportedCluster` (nothing may be written) below the supported floor."""
        verdict = self.verdict()
        if verdict.refusal:
            raise UnsupportedCluster(
                f"the portal does not write to this cluster: {verdict.refusal}"
            )
