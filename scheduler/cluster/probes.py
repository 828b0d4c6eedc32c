"""Whether a registered cluster can serve: its API server answers, takes the credentials, and
runs a Kueue recent enough for MultiKueue (v0.19: the incremental dispatcher nominates workers
in the platform's order). `judge` is pure, from what the door answered (`Answers`); `ask`
collects those answers from a gateway. The sentence `judge` returns is what the cluster's page
and `/readyz` say.

Kueue has no version endpoint: as for the home cluster (support.py), the version is read from
what its CRDs serve. v0.19 added a uniqueness rule to MultiKueueConfig's `spec.clusters`
(`x-kubernetes-validations`, absent from v0.18.6's published CRD and present in v0.19.0 and
v0.19.2), so that rule tells 0.19 from 0.18.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ClusterError
from scheduler.cluster import support

MULTIKUEUE_PROBE_CRD = "multikueueconfigs.kueue.x-k8s.io"
MULTIKUEUE_FLOOR = "0.19"
UPGRADE = f"install Kueue {support.TESTED_KUEUE} (its release manifests or Helm chart)"


@dataclass(frozen=True)
class Answers:
    """What the door answered of one cluster. `credentials` is what was wrong with its
    kubeconfig Secret ("" when the door was built); `status` is the HTTP status of a refused
    call (None with `failure` when nothing answered); the CRDs are None when not installed."""

    server: str = ""
    credentials: str = ""
    version: str = ""
    failure: str = ""
    status: int | None = None
    clusterqueue_crd: dict | None = None
    multikueue_crd: dict | None = None


@dataclass(frozen=True)
class ClusterHealth:
    reachable: bool | None  # None: not tried (its credentials would not do)
    kueue_version: str  # "0.19 or newer", "0.18", "not installed", ...
    problem: str = ""  # what to change; "" when the cluster can serve

    @property
    def ok(self) -> bool:
        return not self.problem


def _status(exc: ClusterError) -> int | None:
    """The HTTP status behind a door's error (the client's exception is its cause)."""
    return getattr(exc.__cause__, "status", None)


def ask(gateway, server: str = "") -> Answers:
    """The answers `judge` reads: `/version`, then Kueue's two CRDs. A refusal stops the
    questions (the next ones would be refused the same)."""
    try:
        version = gateway.server_version()
        clusterqueue = gateway.get("CustomResourceDefinition", support.KUEUE_PROBE_CRD)
        multikueue = gateway.get("CustomResourceDefinition", MULTIKUEUE_PROBE_CRD)
    except ClusterError as exc:
        return Answers(server=server, failure=str(exc), status=_status(exc))
    return Answers(
        server=server, version=version, clusterqueue_crd=clusterqueue, multikueue_crd=multikueue
    )


def _multikueue_rules(crd: dict) -> list:
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") == support.KUEUE_VERSION and version.get("served"):
            schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
            spec = (schema.get("properties") or {}).get("spec") or {}
            clusters = (spec.get("properties") or {}).get("clusters") or {}
            return clusters.get("x-kubernetes-validations") or []
    return []


def judge(name: str, answers: Answers, *, multikueue: bool = True) -> ClusterHealth:
    """The cluster's health from the door's answers (pure). `multikueue`: the cluster takes
    part in a fleet (manager or worker), so it needs Kueue 0.19; a standalone one is held to
    the portal's own floor only (support.py)."""
    where = f"cluster {name}" + (f" ({answers.server})" if answers.server else "")
    if answers.credentials:
        return ClusterHealth(None, "", answers.credentials)
    if answers.failure and answers.status is None:
        return ClusterHealth(
            False,
            "",
            f"{where} does not answer: check the server address in its kubeconfig and that "
            f"the portal's network reaches it ({answers.failure})",
        )
    if answers.status == 401:
        return ClusterHealth(
            True,
            "",
            f"{where} refuses the credentials in its kubeconfig (401 Unauthorized): the token "
            "or client certificate is wrong or expired; put a fresh kubeconfig in its Secret",
        )
    if answers.status == 403:
        return ClusterHealth(
            True,
            "",
            f"{where} takes the credentials but refuses what the portal asks (403 Forbidden): "
            "bind the kubeconfig's account to the portal's ClusterRole and MultiKueue's worker "
            f"role ({answers.failure})",
        )
    if answers.failure:
        return ClusterHealth(True, "", f"{where} answers with an error: {answers.failure}")
    verdict = support.judge(answers.version, answers.clusterqueue_crd)
    if answers.clusterqueue_crd is None:
        return ClusterHealth(True, "not installed", f"Kueue is not installed on {where}: {UPGRADE}")
    if verdict.refusal:
        return ClusterHealth(True, verdict.kueue, f"{where}: {verdict.refusal}")
    if not multikueue:
        return ClusterHealth(True, verdict.kueue)
    if answers.multikueue_crd is None:
        return ClusterHealth(
            True,
            "unknown",
            f"Kueue on {where} has no MultiKueue CRDs ({MULTIKUEUE_PROBE_CRD}): {UPGRADE}",
        )
    if not _multikueue_rules(answers.multikueue_crd):
        return ClusterHealth(
            True,
            "older than 0.19",
            f"Kueue on {where} is older than {MULTIKUEUE_FLOOR}, which MultiKueue's dispatch in "
            f"the platform's order needs: upgrade Kueue to {support.TESTED_KUEUE}",
        )
    return ClusterHealth(True, f"{MULTIKUEUE_FLOOR} or newer")
