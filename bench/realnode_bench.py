"""The local cluster's real node (issue 50): how long until work runs there, and what the
inference stand-in answers through its Service.

1. submit → Running: a Job submitted through the portal (its rendered Job in a team namespace,
   queued and admitted by Kueue, then scheduled) against a bare Job created directly on the node
   in the same run (the baseline), p50 over SAMPLES each, one at a time.
2. a notebook's server from start to answering (`jupyter lab` in the demo image, as a bare pod:
   the time the server itself takes, the portal's share being the submit path above).
3. requests per second the inference stand-in (`serve.py`) answers through its Service at 1, 2
   and 4 replicas (wrk from the node's host for SECONDS each, the Service's iptables rules in
   the way as for any client in the cluster).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
import uuid

from django.conf import settings
from kubernetes import client

from bench.isolation import platform_admin, run_of_its_own, throwaway_database
from catalog.models import Pool, ResourceClass
from catalog.services import ensure_resource_classes
from localcluster import cluster, images, node_addons, realnode
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.runs import reconcile_all
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.submit.spec import workload_spec
from tenants.services import grants as grant_services
from tenants.services import tenants as tenant_services

SAMPLES = 7
SECONDS = 5
ROUNDS = 3
TOLERATE = [{"operator": "Exists"}]
DEMO = images.demo_python_ref()


def _running(core: client.CoreV1Api, namespace: str, selector: str, since: float) -> float:
    while True:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        if any(p.status.phase == "Running" for p in pods):
            return time.monotonic() - since
        if time.monotonic() - since > 120:
            raise TimeoutError(f"no pod of {selector} running after 120 s")
        time.sleep(0.05)


def _container(command: list[str]) -> dict:
    return {"name": "main", "image": DEMO, "imagePullPolicy": "Never", "command": command}


# Running until deleted, and gone at once when stopped (a container's first process gets no
# default handling of SIGTERM: it would wait out the grace period)
COMMAND = [
    "python",
    "-c",
    "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); "
    "time.sleep(600)",
]


def _bare_job(core, batch, namespace: str, i: int) -> float:
    name = f"bare-{i}"
    start = time.monotonic()
    batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 0,
                        "nodeSelector": {realnode.REAL_NODE_LABEL: "true"},
                        "tolerations": TOLERATE,
                        "containers": [_container(COMMAND)],
                    }
                },
            },
        },
    )
    took = _running(core, namespace, f"job-name={name}", start)
    batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
    # as the portal's sample waits for its pod: the next sample never pays this one's teardown
    while any(
        p.status.phase in ("Pending", "Running")
        for p in core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
    ):
        time.sleep(0.1)
    return took


def _submit_to_running(core, batch, kube: KubeGateway, namespace: str):
    """(bare, portal) seconds from create or submit to a Running pod, one sample of each in
    turn, so that a busy moment of the machine hits both alike."""
    # the portal's pods tolerate the real node's taint, as `make run`'s settings say
    settings.GPU_NODE_TOLERATIONS = [
        *settings.GPU_NODE_TOLERATIONS,
        {"key": realnode.REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"},
    ]
    ensure_resource_classes(["B200-180GB"])
    rc = ResourceClass.objects.get(slug="b200-180gb")
    Pool.objects.update_or_create(resource_class=rc, defaults={"capacity": 2})
    admin = platform_admin("rnbench-admin")
    tenant = tenant_services.create_tenant(
        actor=admin, slug="rn", name="rn", allowed_priority_classes=["gpu-low"]
    )
    grant_services.grant_quota(actor=admin, tenant=tenant, resource_class=rc, amount=1)
    reconcile_all(kube, trigger="benchmark")
    bare, portal = [], []
    try:
        for i in range(SAMPLES):
            bare.append(_bare_job(core, batch, namespace, i))
            start = time.monotonic()
            w = workloads.submit_workload(
                actor=admin,
                tenant=tenant,
                spec=workload_spec(
                    name=f"portal-{i}",
                    kind="job",
                    image=DEMO,
                    command=COMMAND,
                    resources={rc.slug: 1},
                    priority="gpu-low",
                ),
            )
            workload_sync.create_in_cluster(kube, w.pk)
            portal.append(_running(core, tenant.namespace, f"job-name={w.k8s_name}", start))
            workloads.cancel_workload(actor=admin, workload=w)
            # what the cancel's task does on a worker (none runs here): the Job goes
            batch.delete_namespaced_job(
                w.k8s_name, tenant.namespace, propagation_policy="Background"
            )
            while any(  # its unit free again: no pod of it left running
                p.status.phase in ("Pending", "Running")
                for p in core.list_namespaced_pod(tenant.namespace).items
            ):
                time.sleep(0.1)
    finally:
        kube.delete("Namespace", tenant.namespace)
        kube.delete("ClusterQueue", tenant.namespace)
    return bare, portal


def _notebook(core, namespace: str) -> float:
    start = time.monotonic()
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "nb", "labels": {"app": "nb"}},
            "spec": {
                "nodeSelector": {realnode.REAL_NODE_LABEL: "true"},
                "tolerations": TOLERATE,
                "containers": [
                    {
                        **_container(
                            [
                                "jupyter",
                                "lab",
                                "--ServerApp.ip=0.0.0.0",
                                "--no-browser",
                                "--ServerApp.token=",
                                "--ServerApp.root_dir=/tmp",
                            ]
                        ),  # fmt: skip
                        "readinessProbe": {
                            "httpGet": {"path": "/api/status", "port": 8888},
                            "periodSeconds": 1,
                        },
                    }
                ],
            },
        },
    )
    while True:
        pod = core.read_namespaced_pod("nb", namespace)
        if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []):
            return time.monotonic() - start
        if time.monotonic() - start > 180:
            raise TimeoutError("the notebook server did not answer in 180 s")
        time.sleep(0.1)


def _service_rps(core, apps, namespace: str) -> dict[int, float]:
    labels = {"app": "echo"}
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "echo"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {realnode.REAL_NODE_LABEL: "true"},
                        "tolerations": TOLERATE,
                        "containers": [
                            {
                                **_container(["python", "/opt/demo/serve.py"]),
                                "readinessProbe": {
                                    "httpGet": {"path": "/healthz", "port": 8080},
                                    "periodSeconds": 1,
                                },
                            }
                        ],
                    },
                },
            },
        },
    )
    service = core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "echo"},
            "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    url = f"http://{service.spec.cluster_ip}/healthz"
    seen: dict[int, list[float]] = {1: [], 2: [], 4: []}
    for _ in range(ROUNDS):  # interleaved: a busy moment of the machine hits every size alike
        for replicas in seen:
            apps.patch_namespaced_deployment_scale(
                "echo", namespace, {"spec": {"replicas": replicas}}
            )
            while _ready_pods(core, namespace) != replicas:
                time.sleep(0.2)
            # kube-proxy writes the endpoints' rules within its minimum sync period (1 s)
            time.sleep(3)
            done = subprocess.run(
                ["wrk", "-t2", "-c16", f"-d{SECONDS}s", url],
                capture_output=True,
                text=True,
                check=True,
            )
            line = next(x for x in done.stdout.splitlines() if x.startswith("Requests/sec"))
            seen[replicas].append(float(line.split()[1]))
    return {replicas: statistics.median(values) for replicas, values in seen.items()}


def _ready_pods(core, namespace: str) -> int:
    """Pods of the stand-in Ready and not stopping (a scaled-down one is gone from the
    Service first)."""
    return sum(
        1
        for p in core.list_namespaced_pod(namespace, label_selector="app=echo").items
        if p.metadata.deletion_timestamp is None
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    )


def run() -> int:
    cluster.up()
    if not realnode.enabled():
        print("real node: off (LOCALCLUSTER_REAL_NODE=0), nothing to measure")
        return 0
    if not shutil.which("wrk"):
        print("real node: wrk is missing (scripts/bootstrap.sh installs it)")
        return 1
    run_of_its_own("rnbench")
    admin_api = cluster.api_client()
    core, apps = client.CoreV1Api(admin_api), client.AppsV1Api(admin_api)
    batch = client.BatchV1Api(admin_api)
    kube = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))
    namespace = f"rnbench-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    node_addons.advertise_gpus(admin_api, "B200-180GB", 2)
    try:
        while True:  # the ServiceAccount admission refuses pods until `default` exists
            try:
                core.read_namespaced_service_account("default", namespace)
                break
            except client.ApiException:
                time.sleep(0.1)
        with throwaway_database("gpu_portal_realnode_bench"):
            bare, portal = _submit_to_running(core, batch, kube, namespace)
        notebook = _notebook(core, namespace)
        rps = _service_rps(core, apps, namespace)
    finally:
        core.delete_namespace(namespace)
        node_addons.withdraw_gpus(admin_api)
        admin_api.close()
    p50_bare, p50_portal = statistics.median(bare), statistics.median(portal)
    print()
    print(f"Real node ({SAMPLES} of each, in turn; requests/s the median of {ROUNDS} rounds)")
    print(f"{'bare Job created on the node -> Running, p50 s':<52} {p50_bare:>8.2f}")
    print(f"{'portal submit (Kueue, team namespace) -> Running, p50 s':<52} {p50_portal:>8.2f}")
    print(f"{'  ratio portal / bare':<52} {p50_portal / p50_bare:>8.2f}")
    print(f"{'notebook server: start -> /api/status answers, s':<52} {notebook:>8.2f}")
    for replicas, value in rps.items():
        ratio = value / rps[1]
        print(f"{f'inference stand-in, {replicas} replica(s), requests/s':<52} {value:>8.0f}"
              f"  ({ratio:.2f} x 1 replica)")  # fmt: skip
    return 0
