"""What a submit names in the team's namespace, checked before it is accepted.

A job that mounts a volume claim the namespace lacks would be accepted and wait forever (its pod
is never placed); it is refused at submit instead, naming the claim. The portal reads claims
already (workspaces make their home claims), and reads them only by name in the team's own
namespace. Secrets are not checked here: the portal is given no read of Secrets (it would see
every team's credentials); a pod whose Secret is missing says so (`queue/pod_reasons.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings

from core.errors import ClusterError, InvalidInput
from scheduler.cluster import kube as kube_module
from scheduler.cluster.kube import KubeGateway

log = logging.getLogger(__name__)


def check_claims(namespace: str, claims: Iterable[str], kube: KubeGateway | None = None) -> None:
    """Raise InvalidInput (400, field `volumes`) naming the first claim `namespace` lacks. An
    API server that does not answer refuses nothing: the pod's own reason says it later."""
    wanted = list(dict.fromkeys(claims))
    if not wanted or not settings.SUBMIT_CHECKS_CLAIMS:
        return
    kube = kube or kube_module.gateway()
    for claim in wanted:
        try:
            found = kube.get("PersistentVolumeClaim", claim, namespace)
        except ClusterError as exc:
            log.warning("volume claims not checked at submit: %s", exc)
            return
        if found is None:
            raise InvalidInput(
                f"volume claim {claim!r} does not exist in the team's namespace {namespace}: "
                "create it first (kubectl apply a PersistentVolumeClaim), or mount one that "
                "exists",
                field="volumes",
                code="claim_not_found",
            )
