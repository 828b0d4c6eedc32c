"""The chart installed as pods on the local cluster's real node (issue 50, item 3): the portal's
image built here from the project's Dockerfile, `helm install` with its trial PostgreSQL and
Redis, the migrations Job first, web, worker and beat Ready, the portal answering through its
Service, its ServiceAccount reconciling a team from inside a pod, and `helm upgrade` and
`helm rollback` that never stop it answering.

Its own lane of `make test` (marker `pods`, after the cluster lane: scripts/test.sh)."""

import json
import os
import subprocess
import threading
import time
import urllib.request
import uuid

import pytest
from kubernetes import client
from kubernetes.stream import stream

from localcluster import (
    build,
    cluster,
    fleet,
    images,
    node_addons,
    node_stack,
    portal_account,
    realnode,
)

pytestmark = [pytest.mark.cluster, pytest.mark.pods]

ON_REAL_NODE = {"key": realnode.REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}


def helm(*args: str, home) -> str:
    env = dict(
        os.environ,
        KUBECONFIG=str(cluster.KUBECONFIG),
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
    )
    binary = build.ensure_built(verbose=False)["helm"]
    done = subprocess.run(
        [str(binary), *args], env=env, capture_output=True, text=True, check=False, timeout=420
    )
    assert done.returncode == 0, f"helm {' '.join(args[:2])}: {done.stderr[-3000:]}"
    return done.stdout


def values(namespace: str) -> list[str]:
    portal, postgres, redis = (image.name for image in images.chart_images())
    repository, tag = portal.rsplit(":", 1)
    settings = {
        "trial": {
            "enabled": True,
            "postgresql": {
                "image": postgres,
                "persistence": {"size": "1Gi", "storageClass": "gpu-portal-local"},
            },
            "redis": {"image": redis},
        },
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "allowedHosts": ["*"],
        # its own instance and team namespaces: what its portal reconciles (the demo's teams)
        # never meets a developer's portal or `make run` on the same cluster, and goes with it
        "portalInstance": namespace,
        "tenantNamespacePrefix": f"{namespace}-",
        "https": False,
        "workloadImageAllowlist": ["*"],  # the demo data names images of every registry
        "gpuOperator": {"namespace": namespace},
        "nodeSelector": {realnode.REAL_NODE_LABEL: "true"},
        # and its GPU taints, where `make run` left the node playing GPUs (node_addons)
        "tolerations": [ON_REAL_NODE, *fleet.gpu_tolerations()],
        # two cores for the whole local cluster: one web pod, small requests
        "web": {"replicaCount": 1, "workers": 1, "threads": 2,
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
                "podDisruptionBudget": {"enabled": False}},
        "workers": [{"name": "all", "queues": ["default", "reconcile", "metering", "notify"],
                     "concurrency": 1, "replicas": 1,
                     "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}}],
    }  # fmt: skip
    return [arg for k, v in settings.items() for arg in ("--set-json", f"{k}={json.dumps(v)}")]


def postgres_volume(core: client.CoreV1Api, name: str) -> None:
    """A volume for the trial PostgreSQL's claim: a directory of the real node's, owned by the
    image's postgres user (the local cluster has no storage provisioner)."""
    path = realnode.NODE_DIR / "volumes" / name
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, 999, 999)
    core.create_persistent_volume(
        {
            "metadata": {"name": name, "labels": {"gpu-portal.local/test": "true"}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "gpu-portal-local",
                "persistentVolumeReclaimPolicy": "Delete",
                "hostPath": {"path": str(path), "type": "Directory"},
            },
        }
    )


@pytest.fixture
def release(kube_cluster, tmp_path):
    bins = {**build.binaries(), **node_stack.binaries()}
    node_addons.build_and_load(bins, tuple(images.chart_images()))
    name = f"pods-{uuid.uuid4().hex[:6]}"
    namespace = f"helm-{name}"
    postgres_volume(kube_cluster.core, name)
    yield name, namespace
    helm("uninstall", name, "-n", namespace, "--ignore-not-found", "--wait", home=tmp_path)
    portal_account.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
    # what its portal made for the demo's teams, by its instance label
    mine = f"gpu-portal.io/instance={namespace}"
    for kind in ("namespaces", "clusterqueues.kueue.x-k8s.io", "cohorts.kueue.x-k8s.io"):
        portal_account.kubectl("delete", kind, "-l", mine, "--ignore-not-found", "--wait=false")
    kube_cluster.core.delete_persistent_volume(name)


def ready(apps: client.AppsV1Api, namespace: str) -> dict[str, int]:
    return {
        d.metadata.name: d.status.ready_replicas or 0
        for d in apps.list_namespaced_deployment(namespace).items
    }


def answer(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (the test's URL)
            return resp.status
    except OSError:
        return 0


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


def in_pod(api, namespace: str, pod: str, command: list[str]) -> str:
    return stream(
        client.CoreV1Api(api).connect_get_namespaced_pod_exec,
        pod,
        namespace,
        command=command,
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
        _request_timeout=300,
    )


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
    web = next(
        p.metadata.name
        for p in core.list_namespaced_pod(namespace).items
        if p.metadata.labels.get("app.kubernetes.io/component") == "web"
    )
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
