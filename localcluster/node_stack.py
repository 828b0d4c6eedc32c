"""What the real node runs, built from Go modules like the control plane (build.py): the
kubelet and kube-proxy of the cluster's Kubernetes, containerd 2.x with its runc shim, CoreDNS
and kube-network-policies. runc itself and the CNI plugins are Debian's (scripts/bootstrap.sh).

Built only when the real node is asked for (`localcluster up` with the real node on, as
`make test` and `make run` do), after the control plane, into the same cache."""

from __future__ import annotations

from pathlib import Path

from . import build

# Debian's runc (1.1.5) fails to start a pod sandbox under this kernel ("can't get final
# child's PID from pipe"), and its crun (1.8.1) refuses the runtime-spec version containerd 2.4
# writes: runc of the same generation as containerd, with cgo (its nsexec is C) and seccomp
# (libseccomp-dev), as its Makefile builds it.
RUNC_VERSION = "v1.5.3"
CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_VERSION = "v2.4.2"
COREDNS_VERSION = "v1.15.0"
# NetworkPolicy on the real node. The module proxy serves v0.7.0 and v0.8.0.
KUBE_NETWORK_POLICIES_VERSION = "v0.8.0"

# kube-network-policies sends the packets a policy may judge to user space with nftables' native
# `queue` statement, which needs CONFIG_NFT_QUEUE; this machine's kernel lacks it (and cannot load
# modules) but has iptables' NFQUEUE target (CONFIG_NETFILTER_XT_TARGET_NFQUEUE, reached from
# nftables through CONFIG_NFT_COMPAT, as iptables-nft does). The edit queues through that target:
# the same queue number and bypass flag, the rest of its rules unchanged.
KNP_QUEUE_EDIT = (
    "\tqueue := &expr.Queue{Num: uint16(c.config.QueueID)}\n"
    "\tif c.config.FailOpen {\n"
    "\t\tqueue.Flag = expr.QueueFlagBypass\n"
    "\t}\n",
    "\t// gpu-portal localcluster: iptables' NFQUEUE target (xt_NFQ_info_v3), not nft's queue.\n"
    "\tqflags := byte(0)\n"
    "\tif c.config.FailOpen {\n"
    "\t\tqflags = 1\n"
    "\t}\n"
    "\tqnum := uint16(c.config.QueueID)\n"
    '\tqueue := &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &xt.Unknown{\n'
    "\t\tbyte(qnum), byte(qnum >> 8), 1, 0, qflags, 0, 0, 0}}\n",
    2,  # both places its rules are written
)
KNP_IMPORT_EDIT = (
    '\t"github.com/google/nftables/expr"\n',
    '\t"github.com/google/nftables/expr"\n\t"github.com/google/nftables/xt"\n',
    1,
)


def components() -> list[build.Component]:
    staging_version = "v0." + build.KUBERNETES_VERSION.split(".", 1)[1]
    return [
        build.Component(
            tag=f"kubernetes-node-{build.KUBERNETES_VERSION}",
            module="k8s.io/kubernetes",
            version=build.KUBERNETES_VERSION,
            packages={name: f"k8s.io/kubernetes/cmd/{name}" for name in ("kubelet", "kube-proxy")},
            replaces={f"k8s.io/{m}": f"k8s.io/{m} {staging_version}" for m in build.K8S_STAGING},
            ldflags=build.k8s_ldflags(),
            tags="grpcnotrace",
        ),
        build.Component(
            tag=f"containerd-{CONTAINERD_VERSION}",
            module=CONTAINERD_MODULE,
            version=CONTAINERD_VERSION,
            packages={
                name: f"github.com/containerd/containerd/v2/cmd/{name}"
                for name in ("containerd", "containerd-shim-runc-v2", "ctr")
            },
            # Without cgo: no btrfs or devmapper snapshotters (overlayfs is the one used here).
            tags="no_btrfs no_devmapper no_zfs urfave_cli_no_docs",
            ldflags=f"-s -w -X {CONTAINERD_MODULE}/version.Version={CONTAINERD_VERSION}",
        ),
        build.Component(
            tag=f"runc-{RUNC_VERSION}",
            module="github.com/opencontainers/runc",
            version=RUNC_VERSION,
            packages={"runc": "github.com/opencontainers/runc"},
            tags="seccomp urfave_cli_no_docs",
            ldflags=f"-s -w -X main.version={RUNC_VERSION.lstrip('v')}",
            cgo=True,
        ),
        build.Component(
            tag=f"coredns-{COREDNS_VERSION}",
            module="github.com/coredns/coredns",
            version=COREDNS_VERSION,
            packages={"coredns": "github.com/coredns/coredns"},
        ),
        build.Component(
            tag=f"kube-network-policies-{KUBE_NETWORK_POLICIES_VERSION}",
            module="sigs.k8s.io/kube-network-policies",
            version=KUBE_NETWORK_POLICIES_VERSION,
            packages={"kube-network-policies": "sigs.k8s.io/kube-network-policies/cmd"},
            module_edits={"pkg/networkpolicy/controller.go": [KNP_IMPORT_EDIT, KNP_QUEUE_EDIT]},
        ),
    ]


def binaries() -> dict[str, Path]:
    return {name: build.bin_dir(c) / name for c in components() for name in c.packages}


def ensure_built(verbose: bool = True) -> dict[str, Path]:
    build.build_missing(components(), verbose=verbose)
    return binaries()
