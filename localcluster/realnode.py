"""One real node beside the KWOK nodes: a kubelet with containerd 2.x and Debian's runc, pod
networking by the CNI bridge plugin, Services by kube-proxy (iptables), cluster DNS by CoreDNS
and NetworkPolicy by kube-network-policies (both as pods on the node, as they run upstream).

What this machine asks of it (localcluster/README.md, "The real node", has the reasons):
- cgroups are hybrid (v1 controllers, cgroup2 at /sys/fs/cgroup/unified) and there is no
  systemd: the kubelet runs with `failCgroupV1: false` and the cgroupfs driver, runc likewise;
- root here lacks CAP_SYS_RESOURCE: containerd keeps oom_score_adj at or above its own;
- Debian's runc and crun are too old for containerd 2.4: runc is built (node_stack.py);
- no image registry outside is reachable: every image is built here (images.py) and imported;
- the kernel has no nftables `queue` expression: kube-network-policies is built with one edit
  (node_stack.py).

The node is tainted `gpu-portal.io/real-node=true:NoSchedule`: only pods that ask for it (a
toleration, e.g. from a Kueue flavor's tolerations or the portal's GPU_NODE_TOLERATIONS) run
here; every other pod stays on the KWOK nodes, whose pods only pretend to run.

`LOCALCLUSTER_REAL_NODE=0` leaves it out (a machine that cannot run containers).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import yaml

from .base import (
    KUBECONFIG,
    PKI,
    STATE_DIR,
    ClusterError,
    api_port,
    ensure_serving_cert,
    is_worker,
)

NODE_NAME = "real-node-0"
NODE_DIR = STATE_DIR / "node"
BRIDGE = "gpuportal0"
POD_CIDR = "10.245.0.0/16"
NODE_IP = "10.245.0.1"  # the bridge's address: the node's, the API server's and the gateway
CLUSTER_DNS = "10.96.0.10"
REAL_NODE_LABEL = "gpu-portal.io/real-node"
TAINT = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
RUNC_ROOT = NODE_DIR / "runc"  # runc's state of the node's containers, apart from any other
CNI_BIN = "/usr/lib/cni"


def enabled() -> bool:
    if is_worker():  # the bridge and the kubelet's ports are one per machine: the main cluster's
        return False
    return os.environ.get("LOCALCLUSTER_REAL_NODE", "1") not in ("0", "false", "no")


def node_ports() -> dict[str, int]:
    """The kubelet's and kube-proxy's ports, after JobSet's (see base.py), so that two checkouts
    with different LOCALCLUSTER_PORT never clash."""
    base = api_port() + 10
    return {
        "kubelet": base,
        "kubelet-healthz": base + 1,
        "kube-proxy-healthz": base + 2,
        "kube-proxy-metrics": base + 3,
        "containerd-metrics": base + 4,
    }


def socket_path() -> Path:
    return NODE_DIR / "containerd.sock"


def ctr_argv(bins: dict[str, Path]) -> list[str]:
    return [str(bins["ctr"]), "--address", str(socket_path()), "--namespace", "k8s.io"]


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and res.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed: {(res.stderr or res.stdout).strip()}")
    return res


def check_host() -> None:
    """Say exactly what is missing when this machine cannot run the node."""
    if os.geteuid() != 0:
        raise ClusterError(
            "the real node needs root (network namespaces, a bridge, iptables); run as root "
            "or set LOCALCLUSTER_REAL_NODE=0 to use KWOK nodes only"
        )
    if not Path(f"{CNI_BIN}/bridge").exists():
        raise ClusterError(
            f"{CNI_BIN}/bridge is missing: install Debian's containernetworking-plugins "
            "(scripts/bootstrap.sh does)"
        )


def prepare_host(bins: dict[str, Path]) -> None:
    """The bridge with the node's address, forwarding and bridged traffic through iptables (for
    kube-proxy and NetworkPolicy), then every configuration file the processes read."""
    check_host()
    if not containerd_answers():
        forget_old_pods()
    if _sh("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        _sh("ip", "link", "add", BRIDGE, "type", "bridge")
    if NODE_IP not in _sh("ip", "-4", "addr", "show", BRIDGE).stdout:
        _sh("ip", "addr", "add", f"{NODE_IP}/16", "dev", BRIDGE)
    _sh("ip", "link", "set", BRIDGE, "up")
    for key in ("net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"):
        Path("/proc/sys", key).write_text("1\n")
    for sub in ("cni", "containerd", "kubelet", "certs", "logs"):
        (NODE_DIR / sub).mkdir(parents=True, exist_ok=True)
    ensure_serving_cert(NODE_DIR / "certs", NODE_NAME, extra_ips=[NODE_IP])
    _write(NODE_DIR / "cni" / "10-gpuportal.conflist", cni_config())
    _write(NODE_DIR / "containerd" / "config.toml", containerd_config(bins["runc"]))
    _write(NODE_DIR / "kubelet" / "config.yaml", yaml.safe_dump(kubelet_config()))
    _write(NODE_DIR / "kube-proxy.yaml", yaml.safe_dump(kube_proxy_config()))


def containerd_answers() -> bool:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(1)
        try:
            sock.connect(str(socket_path()))
        except OSError:
            return False
    return True


def forget_old_pods() -> None:
    """Before this checkout's node starts fresh: the network of pods a node left behind (one
    killed with its session, or another checkout's) goes. Their network namespaces outlive
    their processes and keep addresses in the pod range, which the new node's pods would be
    given again on the same bridge; the bridge is made anew without them. (One real node per
    machine: the bridge and the pod range are the machine's.)"""
    _sh("ip", "link", "del", BRIDGE, check=False)
    netns = Path("/var/run/netns")
    for entry in netns.glob("cni-*") if netns.is_dir() else []:
        _sh("ip", "netns", "delete", entry.name, check=False)


def _write(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def cni_config() -> str:
    import json

    conf = {
        "cniVersion": "1.0.0",
        "name": "gpuportal",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "rangeStart": "10.245.1.0",
                                 "gateway": NODE_IP}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(NODE_DIR / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }  # fmt: skip
    return json.dumps(conf, indent=2) + "\n"


def containerd_config(runc: Path) -> str:
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    return f"""# Written by localcluster/realnode.py
version = 3
root = "{NODE_DIR / "containerd" / "root"}"
state = "{NODE_DIR / "containerd" / "state"}"

[grpc]
  address = "{socket_path()}"

[metrics]
  address = "127.0.0.1:{node_ports()["containerd-metrics"]}"

[{runtime}]
  # The machine withholds CAP_SYS_RESOURCE even from root: no process may lower its
  # oom_score_adj below 0, which the kubelet asks for the pause and Guaranteed containers.
  restrict_oom_score_adj = true
  [{runtime}.containerd]
    default_runtime_name = "runc"
    [{runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{runtime}.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{RUNC_ROOT}"
        SystemdCgroup = false
  [{runtime}.cni]
    bin_dirs = ["{CNI_BIN}"]
    conf_dir = "{NODE_DIR / "cni"}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_REF}"
"""


PAUSE_REF = "localhost/gpu-portal/pause:local"


def kubelet_config() -> dict:
    ports = node_ports()
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The machine's cgroups are v1 (hybrid): from 1.35 the kubelet refuses them unless told.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",  # no systemd here
        "containerRuntimeEndpoint": f"unix://{socket_path()}",
        "address": NODE_IP,
        "port": ports["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports["kubelet-healthz"],
        "tlsCertFile": str(NODE_DIR / "certs" / "tls.crt"),
        "tlsPrivateKeyFile": str(NODE_DIR / "certs" / "tls.key"),
        # The API server's client certificate (logs, exec) is checked against the cluster CA.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(PKI / "ca.crt")},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDNS": [CLUSTER_DNS],
        "clusterDomain": "cluster.local",
        "failSwapOn": False,
        "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False,
        "staticPodPath": "",
        # A test bed on a shared disk: evict only when it is nearly full.
        "evictionHard": {"nodefs.available": "2%", "imagefs.available": "2%"},
        "imageGCHighThresholdPercent": 98,
        "imageGCLowThresholdPercent": 95,
        "containerLogMaxSize": "5Mi",
        "maxPods": 60,
        "registerWithTaints": [TAINT],
    }


def kube_proxy_config() -> dict:
    ports = node_ports()
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clusterCIDR": POD_CIDR,
        "hostnameOverride": NODE_NAME,
        "bindAddress": NODE_IP,
        "healthzBindAddress": f"127.0.0.1:{ports['kube-proxy-healthz']}",
        "metricsBindAddress": f"127.0.0.1:{ports['kube-proxy-metrics']}",
        "clientConnection": {"kubeconfig": str(NODE_DIR / "kubeconfig")},
        # Leave the host's conntrack table size alone (a shared VM).
        "conntrack": {"maxPerCore": 0},
    }


def node_kubeconfig() -> Path:
    """The kubelet's and kube-proxy's credentials: the admin's (the API server authorises with
    RBAC alone here, no Node authorizer), in a file of the node's own."""
    path = NODE_DIR / "kubeconfig"
    _write(path, KUBECONFIG.read_text())
    path.chmod(0o600)
    return path


def component_argv(bins: dict[str, Path]) -> list[tuple[str, list[str], dict[str, str]]]:
    """(name, argv, env) of containerd, the kubelet and kube-proxy, in start order."""
    path = (
        f"{bins['containerd'].parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    )
    kubeconfig = str(NODE_DIR / "kubeconfig")
    return [
        (
            "containerd",
            [str(bins["containerd"]), "--config", str(NODE_DIR / "containerd" / "config.toml"),
             "--log-level", "warn"],
            {"PATH": path},
        ),
        (
            "kubelet",
            [str(bins["kubelet"]), f"--config={NODE_DIR / 'kubelet' / 'config.yaml'}",
             f"--kubeconfig={kubeconfig}", f"--root-dir={NODE_DIR / 'kubelet' / 'root'}",
             f"--cert-dir={NODE_DIR / 'certs'}", f"--hostname-override={NODE_NAME}",
             f"--node-ip={NODE_IP}", f"--node-labels={REAL_NODE_LABEL}=true", "--v=1"],
            {"PATH": path},
        ),
        (
            "kube-proxy",
            [str(bins["kube-proxy"]), f"--config={NODE_DIR / 'kube-proxy.yaml'}", "--v=1"],
            {"PATH": path},
        ),
    ]  # fmt: skip


def config_files() -> list[Path]:
    """The files whose change makes `up` restart the node's processes."""
    return [
        NODE_DIR / "containerd" / "config.toml",
        NODE_DIR / "kubelet" / "config.yaml",
        NODE_DIR / "kube-proxy.yaml",
        NODE_DIR / "cni" / "10-gpuportal.conflist",
    ]


def stop_containers(runc: Path) -> int:
    """Kill and delete every container runc runs for the node (after the kubelet stopped; the
    containerd shims keep them running otherwise), then the shims. Returns how many."""
    if not RUNC_ROOT.is_dir() or not runc.is_file():
        return 0
    ids = _sh(str(runc), "--root", str(RUNC_ROOT), "list", "-q", check=False).stdout.split()
    for cid in ids:
        _sh(str(runc), "--root", str(RUNC_ROOT), "kill", "--all", cid, "KILL", check=False)
    for cid in ids:
        _sh(str(runc), "--root", str(RUNC_ROOT), "delete", "--force", cid, check=False)
    address = str(socket_path()).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and address in argv:
            try:
                os.kill(int(proc.name), 9)
            except OSError:
                pass
    return len(ids)


def unmount_all() -> None:
    """Unmount what the node left mounted under its state (volumes, sandboxes, snapshots), the
    deepest first, so that `reset` can delete it."""
    prefix = str(NODE_DIR) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for target in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        _sh("umount", "-l", target, check=False)
