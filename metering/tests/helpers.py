"""A stand-in gateway that answers list calls with prepared objects (for ingest unit tests; the
cluster tests use the real API server)."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from scheduler import render


class FakeKube:
    def __init__(self):
        self.pods: list[dict] = []
        self.namespaces: list[dict] = []
        self.nodes: list[dict] = []

    def list(self, kind, namespace=None, *, label_selector="", field_selector=""):
        return {"Pod": self.pods, "Namespace": self.namespaces, "Node": self.nodes}[kind]

    def add_namespace(self, name: str, tenant_slug: str) -> None:
        labels = {render.TENANT_LABEL: tenant_slug, render.INSTANCE_LABEL: settings.PORTAL_INSTANCE}
        self.namespaces.append({"metadata": {"name": name, "labels": labels}})


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
