"""Submit to pod Running on the local cluster, for the API bench: interleaved samples of a workload
submitted over HTTP (through the worker to a Job and its pod Running) and the same Job created
directly on the API server, with the helpers that post a submit and wait for a pod to run or
to be gone.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import replace

from bench.api_fixture import IMAGE
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.specs import tenant_namespace
from scheduler.workloads.kinds import from_row, manifests, pod_template
from scheduler.workloads.models import Workload


def _post(base: str, token: str, body: dict) -> dict:
    request = urllib.request.Request(  # noqa: S310 (a local URL)
        f"{base}/api/v1/workloads/",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return json.loads(response.read())


def _until_running(kube: KubeGateway, namespace: str, selector: str, t0: float) -> float:
    deadline = t0 + 60
    while time.perf_counter() < deadline:
        for pod in kube.list("Pod", namespace, label_selector=selector):
            if (pod.get("status") or {}).get("phase") == "Running":
                return time.perf_counter() - t0
        time.sleep(0.02)
    raise TimeoutError(f"no Running pod for {selector} in 60 s")


def _until_gone(kube: KubeGateway, namespace: str, selector: str) -> None:
    deadline = time.monotonic() + 60
    while kube.list("Pod", namespace, label_selector=selector) and time.monotonic() < deadline:
        time.sleep(0.1)


def to_running(kube, base, token, tenant, rc, samples: int) -> tuple[list[float], list[float]]:
    """Interleaved samples: through the portal (HTTP submit → worker → Job → pod Running) and
    the same Job created directly on the API server."""
    namespace = tenant_namespace(tenant)
    via_portal, direct = [], []
    for i in range(samples):
        t0 = time.perf_counter()
        w = _post(
            base,
            token,
            {
                "tenant": tenant.slug,
                "name": f"run-{i}",
                "kind": "job",
                "image": IMAGE,
                "resources": {rc.slug: 1},
                "priority": "gpu-low",
            },
        )
        selector = f"{pod_template.WORKLOAD_LABEL}={w['id']}"
        via_portal.append(_until_running(kube, namespace, selector, t0))
        kube.delete("Job", w["k8s_name"], namespace)
        _until_gone(kube, namespace, selector)

        workload = Workload.objects.get(pk=w["id"])
        spec = from_row.spec_for(workload)
        floor_id = 900_000 + i
        manifest = manifests.render_job(replace(spec, name=f"direct-{i}", workload_id=floor_id))
        selector = f"{pod_template.WORKLOAD_LABEL}={floor_id}"
        t0 = time.perf_counter()
        kube.create(manifest)
        direct.append(_until_running(kube, namespace, selector, t0))
        kube.delete("Job", f"direct-{i}", namespace)
        _until_gone(kube, namespace, selector)
    return via_portal, direct
