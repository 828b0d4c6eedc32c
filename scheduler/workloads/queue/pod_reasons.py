"""What a pending pod says keeps it from running, read before any guess (pure).

Kueue admitted the workload on quota; what holds it now is the pod's own: a volume claim that
is unbound or missing, a Secret or ConfigMap that is missing, an image that cannot be pulled, a
node selector or toleration that no node answers. Only where the scheduler says the nodes lack
the GPUs it asks does the portal's reading of the fleet (`waiting._why`) take over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from scheduler.workloads.kinds import gang

_QUOTED = re.compile(r'"([^"]+)"')


@dataclass(frozen=True)
class PodSays:
    code: str  # volume_unbound, volume_missing, config_missing, image, node_selector, taint
    reason: str
    hint: str


def _named(message: str) -> str:
    found = _QUOTED.search(message)
    return f" {found.group(1)}" if found else ""


def pod_says(reason: str, message: str) -> PodSays | None:
    """The pod's own cause, in words, or None when it says the nodes lack what it asks (or
    says nothing the portal reads): then the fleet's reading explains it."""
    text = message or ""
    low = text.lower()
    if "unbound immediate persistentvolumeclaims" in low or "unbound persistentvolumeclaim" in low:
        return PodSays(
            "volume_unbound",
            "Its volume claim is not bound to a volume yet: the scheduler will not place the "
            "pod until it is (no GPU is missing).",
            "Check the claim (kubectl describe pvc): its storage class must provision a volume, "
            "or a volume must match it.",
        )
    if "persistentvolumeclaim" in low and "not found" in low:
        return PodSays(
            "volume_missing",
            f"It names a volume claim{_named(text)} that does not exist in the team's "
            "namespace: it will wait until the claim is made.",
            "Create the claim, or cancel and submit again naming one that exists.",
        )
    if reason == "CreateContainerConfigError":
        what = "Secret" if "secret" in low else "ConfigMap" if "configmap" in low else "object"
        return PodSays(
            "config_missing",
            f"Its container cannot start: the {what}{_named(text)} it refers to is missing "
            "from the team's namespace.",
            f"Create the {what} in the team's namespace, or cancel and submit again without it.",
        )
    if reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
        return PodSays(
            "image",
            "Its image cannot be pulled (the name or tag is wrong, or the registry refuses "
            "it): the node keeps trying.",
            "Cancel and submit again with an image the cluster can pull.",
        )
    if "insufficient" in low:
        return None  # the nodes lack what it asks: the fleet's reading says which
    if "node affinity/selector" in low:
        return PodSays(
            "node_selector",
            "No node matches its node selector or affinity: it will not be placed as it is.",
            "Drop the node selector or affinity, or ask for a GPU model the team's grant covers.",
        )
    if "untolerated taint" in low:
        return PodSays(
            "taint",
            "The nodes it could run on are tainted and it does not tolerate them (a node may be "
            "drained for maintenance).",
            "Wait for the nodes to come back, or ask the platform team which nodes are out.",
        )
    return None


def read(reason: str, message: str) -> PodSays | None:
    """What a pending workload's pods say (`pod_says`), a gang's short count first: a gang some
    of whose pods run while the rest cannot be placed waits, and says why the rest wait."""
    if reason != gang.INCOMPLETE:
        return pod_says(reason, message)
    short = gang.read_short(message)
    if short is None:
        return None
    count = f"{short.running} of its {short.needed} pods run"
    inner = pod_says(short.reason, short.message)
    if inner is not None:
        return PodSays(
            inner.code,
            f"{count}; a job of several pods runs only whole. {inner.reason}",
            inner.hint,
        )
    return PodSays(
        "gang_unplaced",
        f"{count}: Kueue admitted it on the team's quota, but the nodes of its model have no "
        "free room of its shape for the rest. A job of several pods runs only whole, so it "
        "waits (and holds what it was admitted with) until every pod is placed.",
        "Ask for fewer pods, or a shape per pod that the free nodes hold; cancelling frees what "
        "it holds.",
    )
