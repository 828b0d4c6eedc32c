"""Prepared cluster readings for the ingest unit tests (plain dicts, as the API server answers);
the cluster tests read the real API server."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from scheduler.cluster.render.labels import INSTANCE_LABEL, TENANT_LABEL


def tenant_namespace(name: str, tenant_slug: str) -> dict:
    """A tenant namespace as this portal instance labels it."""
    labels = {TENANT_LABEL: tenant_slug, INSTANCE_LABEL: settings.PORTAL_INSTANCE}
    return {"metadata": {"name": name, "labels": labels}}


def pod(
    name: str,
    ns: str,
    *,
    uid: str,
    node: str,
    resources: dict,
    started: datetime,
    phase: str = "Running",
    finished: datetime | None = None,
    preempted: bool = False,
    workload: int | None = None,
) -> dict:
    status: dict = {"phase": phase, "startTime": started.isoformat().replace("+00:00", "Z")}
    if finished:
        status["containerStatuses"] = [
            {"name": "main", "state": {"terminated": {"finishedAt": finished.isoformat()}}}
        ]
    if preempted:
        status["conditions"] = [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ]
    labels = {"gpu-portal.io/workload": str(workload)} if workload else {}
    return {
        "metadata": {"name": name, "namespace": ns, "uid": uid, "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {k: str(v) for k, v in resources.items()}},
                }
            ],
        },
        "status": status,
    }
