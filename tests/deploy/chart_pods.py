"""The chart installed as pods on the local cluster's real node: helm with the test's own homes,
the values of a small trial install, and the helpers its tests share (tests/deploy/conftest.py
has the release fixture)."""

import json
import os
import subprocess
import urllib.request

from kubernetes import client
from kubernetes.stream import stream

from localcluster import build, cluster, fleet, images, realnode

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


def values(namespace: str, **overrides: object) -> list[str]:
    """`--set-json` arguments of a trial install on the real node, its own portal instance;
    `overrides` replace top-level values."""
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
        # its own instance and team namespaces: what its portal reconciles never meets a
        # developer's portal or `make run` on the same cluster, and goes with it
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
        "workers": [{"name": "all",
                     "queues": ["default", "reconcile", "metering", "notify", "follow"],
                     "concurrency": 1, "replicas": 1,
                     "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}}],
        **overrides,
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


def web_pod(core: client.CoreV1Api, namespace: str) -> str:
    return next(
        p.metadata.name
        for p in core.list_namespaced_pod(namespace).items
        if p.metadata.labels.get("app.kubernetes.io/component") == "web"
    )
