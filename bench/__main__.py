"""`make bench`: run every benchmark and print a table of figures and ratios."""

import argparse
import os
import sys
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.test")


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main() -> int:

    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument(
        "--tenants",
        type=_sizes,
        default=[1000],
        help="reconcile: tenants, or sizes comma-separated (1000,10000: the slope between them)",
    )
    parser.add_argument(
        "--floor-up-to",
        type=int,
        metavar="N",
        help="reconcile: run kubectl's floor only at sizes up to N (default: every size)",
    )
    parser.add_argument(
        "--apply-threads",
        type=int,
        metavar="N",
        help="reconcile: tenants converged at once (default: RECONCILE_APPLY_THREADS)",
    )
    parser.add_argument(
        "--only",
        choices=[
            "reconcile",
            "api",
            "metering",
            "planner",
            "booking",
            "queue",
            "fill",
            "mixed-fill",
            "workload-sync",
            "real-node",
            "stages",
            "scale",
            "fleet",
        ],
        help="run one benchmark (default: all, in order)",
    )
    parser.add_argument("--clients", type=int, default=50, help="api: concurrent clients")
    parser.add_argument("--seconds", type=int, default=10, help="api: seconds per load run")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="api: sample the server with py-spy during each run, stacks in DIR; stages and "
        "scale: cProfile files in DIR (scale: the follower's thread); reconcile: py-spy on the "
        "bench's own process during the cold and no-op runs, stacks in DIR",
    )
    parser.add_argument("--pods", type=int, default=10_000, help="metering: pods to ingest")
    parser.add_argument(
        "--meter-tenants", type=int, default=200, help="metering: tenants (pods and dashboard)"
    )
    parser.add_argument(
        "--workloads", type=int, default=5000, help="workload-sync: live workloads to follow"
    )
    parser.add_argument(
        "--stage-tenants",
        type=_sizes,
        default=[1000, 10_000],
        help="stages: team counts, comma-separated (PostgreSQL only, no cluster)",
    )
    parser.add_argument(
        "--stage-workloads",
        type=_sizes,
        default=[5000, 20_000, 50_000],
        help="stages: workload counts, comma-separated",
    )
    fill = parser.add_argument_group("mixed-fill")
    fill.add_argument("--fill-run-s", type=float, default=10.0, help="each Job's run time")
    fill.add_argument(
        "--fill-sides", default="DRA,layouts", help="DRA, layouts or both (comma-separated)"
    )
    parser.add_argument(
        "--fleet-jobs", type=int, default=5, help="fleet: Jobs timed submit → Running, each way"
    )
    scale = parser.add_argument_group("scale (the local cluster, KWOK nodes)")
    scale.add_argument("--teams", type=int, default=1000)
    scale.add_argument("--departments", type=int, default=10)
    scale.add_argument("--nodes", type=int, default=200, help="KWOK GPU nodes (--large)")
    scale.add_argument("--jobs", type=int, default=5000, help="Jobs per run (5000, 10000, 20000)")
    scale.add_argument("--rate", type=float, default=50.0, help="Jobs submitted per second")
    scale.add_argument("--run-s", type=float, default=5.0, help="each Job's run time")
    scale.add_argument(
        "--ingest-every-s",
        type=float,
        default=10.0,
        help="the metering ingest's period beside the sync (the portal's default is 60 s)",
    )
    args = parser.parse_args()
    django.setup()
    # The one place bench loads its benchmarks: they import models, which need django.setup().
    from bench import (
        api_bench,
        booking_bench,
        fill_bench,
        fleet_bench,
        metering_bench,
        mixed_fill_bench,
        planner_bench,
        queue_bench,
        realnode_bench,
        reconcile_bench,
        scale_bench,
        scale_stages,
        workload_sync_bench,
    )

    # Latency-sensitive runs first: the reconcile run leaves thousands of namespaces that the
    # cluster goes on deleting for minutes, and that load would distort what follows.
    rc = 0
    if args.only in (None, "planner"):
        rc |= planner_bench.run()
    if args.only in (None, "booking"):
        rc |= booking_bench.run()
    if args.only in (None, "api"):
        rc |= api_bench.run(clients=args.clients, seconds=args.seconds, profile_dir=args.profile)
    if args.only in (None, "metering"):
        rc |= metering_bench.run(pods=args.pods, tenants=args.meter_tenants)
    if args.only in (None, "queue"):
        rc |= queue_bench.run()
    if args.only in (None, "fill"):
        rc |= fill_bench.run()
    if args.only in (None, "mixed-fill"):
        rc |= mixed_fill_bench.run(run_s=args.fill_run_s, sides=tuple(args.fill_sides.split(",")))
    if args.only in (None, "workload-sync"):
        rc |= workload_sync_bench.run(workloads=args.workloads)
    if args.only in (None, "real-node"):
        rc |= realnode_bench.run()
    if args.only == "stages":  # PostgreSQL only: not part of the cluster's `make bench`
        rc |= scale_stages.run(
            tenants=args.stage_tenants, workloads=args.stage_workloads, profile_dir=args.profile
        )
    if args.only == "scale":  # sized by its flags; run it on its own, after the others
        rc |= scale_bench.run(
            teams=args.teams,
            departments=args.departments,
            nodes=args.nodes,
            jobs=args.jobs,
            per_s=args.rate,
            run_s=args.run_s,
            ingest_every_s=args.ingest_every_s,
            profile_dir=args.profile,
        )
    if args.only == "fleet":  # starts a second local cluster: on its own
        rc |= fleet_bench.run(tenants=args.tenants[0], jobs=args.fleet_jobs)
    if args.only in (None, "reconcile"):
        rc |= reconcile_bench.run(
            tenants=args.tenants,
            floor_up_to=args.floor_up_to,
            apply_threads=args.apply_threads,
            profile_dir=args.profile,
        )
    return rc


if __name__ == "__main__":
    sys.exit(main())
