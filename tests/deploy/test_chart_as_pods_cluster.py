"""The chart installed as pods on the local cluster's real node (issue 50, item 3): the portal's
image built here from the project's Dockerfile, `helm install` with its trial PostgreSQL and
Redis, the migrations Job first, web, worker and beat Ready, the portal answering through its
Service, its ServiceAccount reconciling a team from inside a pod, and `helm upgrade` and
`helm rollback` that never stop it answering.

Its own lane of `make test` (marker `pods`, after the cluster lane: scripts/test.sh)."""

import json
import threading
import time

import pytest
from kubernetes import client

from localcluster import portal_account, realnode
from tests.deploy.chart_pods import answer, helm, in_pod, ready, values, web_pod

pytestmark = [pytest.mark.cluster, pytest.mark.pods]


class Prober(threading.Thread):
    """GET `url` every 0.2 s until stopped; counts what did not answer 200."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.sent, self.failed, self.stopping = url, 0, [], threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            status = answer(self.url)
            self.sent += 1
            if status != 200:
                self.failed.append((time.strftime("%H:%M:%S"), status))
            time.sleep(0.2)


RECONCILE = """
from scheduler.cluster.kube import gateway
from scheduler.cluster.reconcile.runs import reconcile_all
from tenants.models import Tenant
summary = reconcile_all(gateway(), trigger="test")
print("RECONCILED", sorted(t.namespace for t in Tenant.objects.all()))
"""


def test_the_chart_runs_as_pods_answers_reconciles_and_survives_upgrade_and_rollback(
    kube_cluster, release, tmp_path
):
    name, namespace = release
    api = kube_cluster.api_client
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    started = time.monotonic()
    helm("install", name, str(portal_account.CHART), "-n", namespace, "--create-namespace",
         "--wait", "--timeout=6m", *values(namespace), home=tmp_path)  # fmt: skip
    installed_in = time.monotonic() - started
    jobs = client.BatchV1Api(api).list_namespaced_job(namespace).items
    migrate = [j for j in jobs if "-migrate" in j.metadata.name]
    assert migrate and all(j.status.succeeded == 1 for j in migrate), "migrations Job not done"
    deployments = ready(apps, namespace)
    assert len(deployments) >= 3 and all(deployments.values()), deployments
    for pod in core.list_namespaced_pod(namespace).items:
        assert pod.spec.node_name == realnode.NODE_NAME, pod.metadata.name
    service = core.read_namespaced_service(name + "-gpu-portal", namespace)
    url = f"http://{service.spec.cluster_ip}:{service.spec.ports[0].port}"
    assert answer(f"{url}/readyz") == 200
    assert answer(f"{url}/accounts/login/") == 200

    # A team, reconciled in full by the portal's own ServiceAccount from inside its pod.
    web = web_pod(core, namespace)
    seeded = in_pod(api, namespace, web, ["python", "manage.py", "seed_demo"])
    out = in_pod(api, namespace, web, ["python", "manage.py", "shell", "-c", RECONCILE])
    assert "RECONCILED" in out, seeded[-2000:] + out[-3000:]
    teams = json.loads(out.split("RECONCILED", 1)[1].strip().replace("'", '"'))
    assert teams, seeded[-3000:]
    quota = core.read_namespaced_resource_quota("gpu-portal-quota", teams[0])
    managers = {m.manager for m in quota.metadata.managed_fields or []}
    assert managers, "the team's quota was not written"

    # Upgrade (a changed value) and rollback: the portal answers throughout.
    prober = Prober(f"{url}/readyz")
    prober.start()
    try:
        helm("upgrade", name, str(portal_account.CHART), "-n", namespace, "--wait",
             "--timeout=6m", *values(namespace), "--set", "podAnnotations.upgraded=yes",
             home=tmp_path)  # fmt: skip
        helm("rollback", name, "1", "-n", namespace, "--wait", "--timeout=6m", home=tmp_path)
    finally:
        prober.stopping.set()
        prober.join()
    assert prober.sent > 20 and not prober.failed, (prober.sent, prober.failed)
    history = json.loads(helm("history", name, "-n", namespace, "-o", "json", home=tmp_path))
    assert [h["status"] for h in history][-1] == "deployed" and len(history) == 3
    print(f"chart installed as pods in {installed_in:.0f} s")
