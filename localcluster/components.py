"""What the local control plane runs: each component's command line (etcd, kube-apiserver,
JobSet, Kueue, controller-manager, scheduler, kwok, the GPU simulator), the scheduler's
configuration, and the files whose change makes `up` restart a running component."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from catalog import facts

from . import jobset, kueue, realnode
from .base import (
    KUBECONFIG,
    PACKAGE_DIR,
    PKI,
    REPO_ROOT,
    STATE_DIR,
    api_port,
    etcd_ports,
    is_worker,
)

SERVICE_CIDR = "10.96.0.0/16"
CONTROLLERS = ",".join(
    [
        "namespace-controller",
        "garbage-collector-controller",
        "resourcequota-controller",
        "job-controller",
        "cronjob-controller",
        "deployment-controller",
        "daemonset-controller",  # the real node's kube-network-policies
        "persistentvolume-binder-controller",  # the chart's trial PostgreSQL on the real node
        # and its claim let go when its namespace goes (else the namespace stays Terminating)
        "persistentvolumeclaim-protection-controller",
        "persistentvolume-protection-controller",
        "replicaset-controller",
        "statefulset-controller",
        "disruption-controller",
        "serviceaccount-controller",
        "serviceaccount-token-controller",
        "root-ca-certificate-publisher-controller",
        "clusterrole-aggregation-controller",
        "node-lifecycle-controller",
        "taint-eviction-controller",
        "pod-garbage-collector-controller",
        "ttl-after-finished-controller",
        # DRA: a pod's claims made from its ResourceClaimTemplates, and freed when it ends
        "resourceclaim-controller",
        "endpoints-controller",
        "endpointslice-controller",
        # inference services scale on the custom metrics API (localcluster/metrics_adapter.py)
        "horizontal-pod-autoscaler-controller",
    ]
)


@dataclass
class Component:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None


# What a MultiKueue worker leaves out (base.role): the GPU simulator (its nodes keep their
# layouts). JobSet stays: MultiKueue watches every kind the manager's Kueue integrates on each
# worker, and a worker without the JobSet CRD is refused ("no matches for kind JobSet",
# MultiKueueCluster inactive with ClientConnectionFailed); dispatched JobSets also need its
# controller there.
NOT_ON_A_WORKER = ("gpu-simulator",)


def component_specs(bins: dict[str, Path]) -> list[Component]:
    specs = _all_specs(bins)
    if is_worker():
        return [c for c in specs if c.name not in NOT_ON_A_WORKER]
    return specs


def _all_specs(bins: dict[str, Path]) -> list[Component]:
    client_port, peer_port = etcd_ports()
    kc = str(KUBECONFIG)
    return [
        Component(
            "etcd",
            [
                str(bins["etcd"]),
                "--name=localcluster",
                f"--data-dir={STATE_DIR / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{client_port}",
                f"--advertise-client-urls=http://127.0.0.1:{client_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=localcluster=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
        ),
        Component(
            "kube-apiserver",
            [
                str(bins["kube-apiserver"]),
                *_apiserver_network_flags(),
                f"--secure-port={api_port()}",
                f"--etcd-servers=http://127.0.0.1:{client_port}",
                f"--cert-dir={PKI}",
                f"--tls-cert-file={PKI / 'apiserver.crt'}",
                f"--tls-private-key-file={PKI / 'apiserver.key'}",
                f"--client-ca-file={PKI / 'ca.crt'}",
                f"--token-auth-file={PKI / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,"
                "Priority,ResourceQuota,DefaultTolerationSeconds",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={PKI / 'sa.pub'}",
                f"--service-account-signing-key-file={PKI / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
        ),
        # Before Kueue, so that Kueue finds the JobSet CRD at start (it would otherwise set its
        # JobSet integration up once the CRD appears). Its webhooks see JobSets and, of pods,
        # only JobSet's own.
        Component("jobset", jobset.argv(bins["jobset"])),
        # Right after the API server: `down` stops it before the API server, and its webhooks
        # gate nothing outside namespaces labelled gpu-portal.io/queue-enforced=true.
        Component("kueue", kueue.argv(bins["kueue"]), env=kueue.env()),
        Component(
            "kube-controller-manager",
            [
                str(bins["kube-controller-manager"]),
                f"--kubeconfig={kc}",
                "--leader-elect=false",
                f"--controllers={CONTROLLERS}",
                f"--service-account-private-key-file={PKI / 'sa.key'}",
                f"--root-ca-file={PKI / 'ca.crt'}",
                "--use-service-account-credentials=false",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                # Quicker quota and namespace bookkeeping for tests (defaults are 5 min / 5 min).
                "--resource-quota-sync-period=30s",
                "--namespace-sync-period=1m",
                # the autoscaler looks every 5 s (default 15 s), so scaling tests stay short
                "--horizontal-pod-autoscaler-sync-period=5s",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--v=1",
            ],
        ),
        Component(
            "kube-scheduler",
            [
                str(bins["kube-scheduler"]),
                f"--config={write_scheduler_config()}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--v=1",
            ],
        ),
        Component(
            "kwok",
            [
                str(bins["kwok"]),
                f"--kubeconfig={kc}",
                f"--config={PACKAGE_DIR / 'kwok-stages.yaml'}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--cidr=10.244.0.1/16",
                "--node-ip=10.240.0.1",
            ],
        ),
        Component(
            "gpu-simulator",
            [
                sys.executable,
                "-m",
                "localcluster.simulator",
                f"--kubeconfig={kc}",
            ],
            env={"PYTHONPATH": str(REPO_ROOT)},
        ),
        *_node_specs(bins),
    ]


def _apiserver_network_flags() -> list[str]:
    if not realnode.enabled():
        # No endpoints for the `kubernetes` Service: 127.0.0.1 is refused there.
        return [
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",
        ]
    # The real node's pods reach it through the `kubernetes` Service, whose endpoint is the
    # advertised address: the node's bridge. It listens there and on 127.0.0.1 (all addresses:
    # one --bind-address only), and calls the kubelet (logs, exec) with a client certificate.
    return [
        "--bind-address=0.0.0.0",
        f"--advertise-address={realnode.NODE_IP}",
        f"--kubelet-client-certificate={PKI / 'kubelet-client' / 'tls.crt'}",
        f"--kubelet-client-key={PKI / 'kubelet-client' / 'tls.key'}",
        "--kubelet-preferred-address-types=InternalIP",
    ]


def _node_specs(bins: dict[str, Path]) -> list[Component]:
    if not realnode.enabled() or "kubelet" not in bins:
        return []
    return [Component(name, argv, env) for name, argv, env in realnode.component_argv(bins)]


def scheduler_config() -> dict:
    """kube-scheduler's configuration: GPU resources bin-packed (`MostAllocated`), as GPU
    clusters configure it, so that whole GPUs stay together on a node for the pods that ask
    several at once; the default (`LeastAllocated`) spreads pods and strands them. Every GPU
    resource name the catalog knows (whole, time-sliced replicas, MIG profiles) counts."""
    names = {"nvidia.com/gpu", "nvidia.com/gpu.shared"}
    for model in facts.load_catalog().values():
        names.update(p.resource_name for p in model.profiles.values())
    gpu = [{"name": n, "weight": 10} for n in sorted(names)]
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(KUBECONFIG), "qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": False},
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "scoringStrategy": {
                                "type": "MostAllocated",
                                "resources": [
                                    *gpu,
                                    {"name": "cpu", "weight": 1},
                                    {"name": "memory", "weight": 1},
                                ],
                            }
                        },
                    }
                ],
            }
        ],
    }


def write_scheduler_config() -> Path:
    path = STATE_DIR / "scheduler-config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(scheduler_config(), sort_keys=False))
    return path


# What the GPU simulator runs and reads: when any of it changed since the running one started,
# `up` restarts it, so a developer's running cluster follows a pull (e.g. new node labels).
# Globs, not a list: a module or data file the simulator starts reading is counted without a
# second edit here.
SIMULATOR_SOURCE_GLOBS = (
    (PACKAGE_DIR, "*.py"),
    (PACKAGE_DIR, "*.yaml"),
    (REPO_ROOT / "catalog", "facts.py"),
    (REPO_ROOT / "catalog" / "data", "*"),
)


def simulator_sources() -> list[Path]:
    return sorted(
        path
        for folder, pattern in SIMULATOR_SOURCE_GLOBS
        for path in folder.glob(pattern)
        if path.is_file()
    )


# Configuration files a running component read at start: `up` restarts it when they change.
CONFIG_FILES = {
    "kwok": (PACKAGE_DIR / "kwok-stages.yaml",),
    "kube-scheduler": (STATE_DIR / "scheduler-config.yaml",),
    "containerd": (realnode.NODE_DIR / "containerd" / "config.toml",),
    "kubelet": (realnode.NODE_DIR / "kubelet" / "config.yaml",),
    "kube-proxy": (realnode.NODE_DIR / "kube-proxy.yaml",),
}
