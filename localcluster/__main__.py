"""Command line: python -m localcluster
{build,up,down,reset,status,real-node,dra-node,fleet,worker}."""

from __future__ import annotations

import argparse
import sys

import yaml

from . import build, cluster, dra_node, fleet, worker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build (or find cached) etcd, kube-*, kubectl, kwok and kueue")
    p_up = sub.add_parser("up", help="start the cluster (building first if needed)")
    p_up.add_argument(
        "--large",
        type=int,
        default=None,
        metavar="N",
        help="also create N generated GPU nodes for benchmarks (0 removes them)",
    )
    p_up.add_argument("--timeout", type=float, default=180, help="seconds to wait for nodes")
    sub.add_parser("down", help="stop all cluster processes (state is kept)")
    sub.add_parser("reset", help="stop the cluster and delete its state")
    sub.add_parser("status", help="show what runs")
    p_real = sub.add_parser(
        "real-node", help="say which nodes are real and which simulated; --gpus MODEL:N plays GPUs"
    )
    p_real.add_argument(
        "--gpus", default=None, metavar="MODEL:N", help="the real node plays N GPUs of MODEL"
    )
    p_dra = sub.add_parser(
        "dra-node", help="add a KWOK GPU node served through DRA (--remove deletes it)"
    )
    p_dra.add_argument("--gpus", default="A100-40GB:1", metavar="MODEL:N")
    p_dra.add_argument("--name", default=dra_node.DEFAULT_NAME)
    p_dra.add_argument("--remove", action="store_true")
    p_fleet = sub.add_parser("fleet", help="print the Node manifests of the fleet as YAML")
    p_fleet.add_argument("--large", type=int, default=0, metavar="N")
    p_worker = sub.add_parser(
        "worker", help="a second cluster, a MultiKueue worker (localcluster/worker.py)"
    )
    p_worker.add_argument("action", choices=("up", "down", "status"))
    args = parser.parse_args(argv)

    try:
        if args.command == "build":
            for name, path in build.ensure_built().items():
                print(f"{name:24} {path}")
        elif args.command == "up":
            cluster.up(large=args.large, timeout=args.timeout)
        elif args.command == "down":
            cluster.down()
        elif args.command == "reset":
            cluster.reset()
        elif args.command == "status":
            return cluster.status()
        elif args.command == "real-node":
            return cluster.real_node(args.gpus)
        elif args.command == "dra-node":
            return cluster.dra(args.gpus, args.name, remove=args.remove)
        elif args.command == "worker":
            if args.action == "status":
                return worker.status()
            if args.action == "up":
                seconds = worker.up()
                print(f"worker up in {seconds:.1f} s; KUBECONFIG={worker.KUBECONFIG}")
            else:
                worker.down()
        elif args.command == "fleet":
            docs = [fleet.node_manifest(s) for s in fleet.node_templates(args.large)]
            yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
    except build.BuildError as exc:
        print(f"localcluster: building the Kubernetes binaries failed: {exc}", file=sys.stderr)
        return 2
    except (cluster.ClusterError, TimeoutError) as exc:
        print(f"localcluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
