"""`make replay`: replay the Alibaba 2023 GPU trace through the portal's policies.

Part 1 (over time, on the local cluster) and part 2 (static packing against the FGD paper's
published figures, pure Python) print one table each and write `replay.md` and
`allocation.png` to the output folder. Part "simulate" (`--part simulate`, not in "all")
replays at trace time in pure Python: no cluster, no database; part "calibrate" fits its
harness latencies to part 1's observations.json and reports the match per policy, no cluster
either. The trace is read from where it lies (`--trace`), never copied. See docs/replay.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import django
from django.conf import settings
from django.db import connection

from localcluster import cluster, portal_account
from replay import packing, packing_table, published, trace
from replay.trace import DEFAULT_TRACE_DIR, NODE_FILE, POD_FILE, TraceError
from replay.workload import POLICIES, select_window

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.test")

REPO = Path(__file__).resolve().parents[1]
PART_ONE_POLICIES = "".join(POLICIES)  # part 1 runs these; simulate adds its what-if rows


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0")
        return value

    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m replay", description=__doc__)
    p.add_argument(
        "--trace",
        type=Path,
        default=Path(DEFAULT_TRACE_DIR),
        help=f"folder with {POD_FILE} and {NODE_FILE} (or set REPLAY_TRACE_DIR)",
    )
    p.add_argument("--pods-file", default=POD_FILE, help="pod list inside --trace")
    p.add_argument(
        "--part", choices=["all", "overtime", "packing", "simulate", "calibrate"], default="all"
    )
    p.add_argument("--out", type=Path, default=REPO / ".local" / "replay", help="output folder")
    p.add_argument("--seed", type=int, default=0, help="team split (part 1), first seed (part 2)")
    g = p.add_argument_group("part 1: over time on the local cluster")
    g.add_argument("--policies", default=PART_ONE_POLICIES,
                   help="rows, in order (default abcde; the cluster also g, h, i; simulate: "
                        "also f…m)")  # fmt: skip
    g.add_argument("--repeat", type=_positive(int), default=1,
                   help="runs of each policy, interleaved (a…e, a…e): mean and range")  # fmt: skip
    g.add_argument("--nodes", type=_positive(int), default=6, help="fleet nodes")
    g.add_argument("--gpus-per-node", type=_positive(int), default=8)
    g.add_argument("--model", default="B200-180GB", help="catalog model of the replay's fleet")
    g.add_argument("--teams", type=_positive(int), default=4)
    g.add_argument("--window-hours", type=_positive(float), default=24.0,
                   help="trace hours replayed (the last ones of the trace)")  # fmt: skip
    g.add_argument("--seconds-per-policy", type=_positive(float), default=60.0,
                   help="wall seconds each policy's window is compressed into")  # fmt: skip
    g = p.add_argument_group("simulate: at trace time, no cluster (also --policies, --nodes, …)")
    g.add_argument("--whole-trace", action="store_true",
                   help="every GPU pod of the trace, not the last --window-hours")  # fmt: skip
    g.add_argument("--no-search", action="store_true", help="skip the carrying-fleet search")
    g.add_argument("--fair-sharing", action="store_true",
                   help="what-if: Kueue's fair sharing on (the portal leaves it off)")  # fmt: skip
    g.add_argument("--harness", choices=["none", "cluster"], default="none",
                   help="cluster: part 1's latencies at its compression")  # fmt: skip
    g.add_argument("--gang-size", type=int, default=2,
                   help="workers per assumed multi-node gang (replay/simulate/gangs.py); 0: "
                   "no gang table")  # fmt: skip
    g = p.add_argument_group("calibrate: the simulator against part 1's observations, no cluster")
    g.add_argument("--observations", type=Path,
                   default=REPO / ".local" / "replay-calib" / "observations.json",
                   help="part 1's observations.json (made with the same --window-hours, "
                   "--teams, --seed, --nodes)")  # fmt: skip
    g = p.add_argument_group("part 2: static packing (FGD's method)")
    g.add_argument("--rho", type=_positive(float), default=1.3, help="load to sample up to")
    g.add_argument("--seeds", type=_positive(int), default=10)
    g.add_argument("--packing-model", default="A100-80GB",
                   help="catalog model every trace model is re-imagined as")  # fmt: skip
    g.add_argument("--methods", default=",".join(packing.METHODS),
                   help=f"comma-separated, of {', '.join(packing.METHODS)}")  # fmt: skip
    return p


def machine() -> str:
    return f"{platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def run_packing(args, say) -> str:
    pods = trace.read_pods(args.trace / args.pods_file)
    nodes = trace.read_nodes(args.trace / trace.NODE_FILE)
    workload = published.workload_of(args.pods_file)
    say(f"part 2: {workload}, {len(nodes)} nodes re-imagined as {args.packing_model}, "
        f"ρ = {args.rho}, {args.seeds} seeds")  # fmt: skip
    try:
        results = packing.run_packing(
            pods,
            nodes,
            model=args.packing_model,
            rho=args.rho,
            seeds=range(args.seed, args.seed + args.seeds),
            methods=[m.strip() for m in args.methods.split(",") if m.strip()],
            progress=say,
        )
    except ValueError as exc:
        raise SystemExit(f"replay: {exc}") from None
    return packing_table.packing_table(results, workload)


def run_overtime(args, say) -> tuple[str, list]:
    django.setup()
    # The one place replay loads what needs Django set up: part 1's models and services, and
    # the Celery app. Part 2 (packing) is pure Python and runs without them.
    from portal.celery import app
    from replay import overtime, report
    from replay.simulate.rows import CLUSTER_ROWS

    policies = [c for c in args.policies if c.strip()]
    unknown = [c for c in policies if c not in CLUSTER_ROWS]
    if unknown or not policies:
        raise SystemExit(
            f"--policies: {''.join(unknown) or 'none'} cannot run on the cluster; use letters "
            f"of {''.join(CLUSTER_ROWS)}"
        )
    pods = trace.read_pods(args.trace / args.pods_file)
    window = select_window(
        pods, length=round(args.window_hours * 3600), teams=args.teams, seed=args.seed
    )
    compression = window.length / args.seconds_per_policy
    say(
        f"part 1: the last {args.window_hours:g} trace hours: {len(window.pods)} GPU pods "
        f"({window.carried_in} running when it opens; {window.skipped_unscheduled} never ran in "
        f"the trace: left out), {args.teams} teams, compressed {compression:,.0f}× into "
        f"{args.seconds_per_policy:g} s per policy"
    )
    cluster.up()
    cluster.fresh_kwok()  # pods run as long as asked, however long the cluster has run
    settings.PORTAL_INSTANCE = "replay"
    settings.TENANT_NAMESPACE_PREFIX = "replay-"
    settings.KUBECONFIG = str(portal_account.kubeconfig())
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = "gpu_portal_replay"
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        runs = overtime.run_all(
            window,
            policies * args.repeat,
            compression=compression,
            cfg=overtime.FleetConfig(args.nodes, args.gpus_per_node, args.model),
            teams=args.teams,
            kubeconfig=settings.KUBECONFIG,
            admin_kubeconfig=str(cluster.KUBECONFIG),
            progress=say,
        )
    finally:
        app.control.purge()  # the submits' messages for a worker that is not there
        connection.creation.destroy_test_db(old_name, verbosity=0)
    title = (
        f"{args.nodes}×{args.gpus_per_node} {args.model} (simulated), last {args.window_hours:g} h "
        f"of the Alibaba 2023 trace, {args.teams} teams"
    )
    chart = report.allocation_chart(runs, args.out / "allocation.png", title)
    say(f"chart: {chart}")
    observed = args.out / "observations.json"
    observed.write_text(json.dumps(report.observations(runs), indent=1))
    say(f"every job as the cluster served it: {observed}")
    return report.overtime_table(runs), runs


def run_simulate(args, say) -> str:
    """Part "simulate": no cluster is started and no database opened. Django's settings are
    loaded only because the portal's priority classes are defined in `tenants.models`."""
    django.setup()
    from replay.simulate import engine, fleet, goals, report, rows

    policies = [c for c in args.policies if c.strip()]
    if not policies or any(c not in rows.ROWS for c in policies):
        raise SystemExit(f"--policies: use letters of {''.join(rows.ROWS)}")
    if args.policies == PART_ONE_POLICIES:
        policies += list(rows.WHAT_IF)  # the default: the simulator's what-if rows too
    pods = trace.read_pods(args.trace / args.pods_file)
    gpu = [p for p in pods if p.num_gpu > 0]
    length = (
        max(p.creation for p in gpu) - min(p.creation for p in gpu) + 1
        if args.whole_trace
        else round(args.window_hours * 3600)
    )
    window = select_window(pods, length=length, teams=args.teams, seed=args.seed)
    compression = window.length / args.seconds_per_policy
    harness = (
        engine.Harness.cluster_like(compression) if args.harness == "cluster" else engine.Harness()
    )
    base = fleet.Fleet(args.nodes, args.gpus_per_node, args.model)
    what = "the whole trace" if args.whole_trace else f"the last {args.window_hours:g} h"
    effects = [f"{k} {v:g}" for k, v in vars(harness).items() if v] or ["none"]
    say(
        f"simulate: {what} ({window.length / 3600:,.0f} trace hours): {len(window.pods)} GPU pods "
        f"({window.carried_in} running when it opens; {window.skipped_unscheduled} never ran in "
        f"the trace: left out), {args.teams} teams; harness effects (trace s): {', '.join(effects)}"
    )
    started = time.monotonic()
    zero, found = rows.all_rows(
        window, "".join(policies), base, args.teams, harness, args.seed,
        search=not args.no_search, fair_sharing=args.fair_sharing, progress=say,
    )  # fmt: skip
    say(f"simulated in {time.monotonic() - started:.1f} s")
    out = (
        report.table(zero, found, base)
        + "\n"
        + goals.table(zero, found, base)
        + goals.reference(window, found, base, zero)
        + goals.dra_goal(window, found, base, zero)
    )
    if args.gang_size >= 2:
        out += "\n" + _gang_table(args, pods, window.length, say)
    return out


def _gang_table(args, pods, length: int, say) -> str:
    """Gang admission, whole and split, on the window of the same length with the most
    node-sized pods (the default one may have none): replay/simulate/gangs.py."""
    from replay.simulate import gangs

    big = [p.creation for p in pods if p.num_gpu == args.gpus_per_node and p.timed]
    end = gangs.busiest_end(big, length)
    if end is None:
        return f"Gangs: the trace has no {args.gpus_per_node}-GPU pod to stand for one.\n"
    window = select_window(pods, length=length, end=end, teams=args.teams, seed=args.seed)
    jobs = gangs.form_gangs(window.pods, gpus_per_node=args.gpus_per_node, size=args.gang_size)
    say(f"gangs: the {length / 3600:g} h window ending at trace second {end} holds "
        f"{sum(1 for j in jobs if j.size > 1)} {args.gpus_per_node}-GPU pods")  # fmt: skip
    results = [
        gangs.simulate(jobs, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                       horizon=length, mode=mode)
        for mode in gangs.MODES
    ]  # fmt: skip
    return gangs.table(
        results, nodes=args.nodes, gpus_per_node=args.gpus_per_node, size=args.gang_size
    )


def run_calibrate(args, say) -> str:
    """Part "calibrate": reads part 1's observations; like "simulate", no cluster, no database.
    The window, teams, seed and fleet are this command's flags: they must be part 1's."""
    django.setup()
    from replay.simulate import calibrate, fleet
    from replay.simulate.rows import CLUSTER_ROWS

    try:
        runs = json.loads(args.observations.read_text())["runs"]
    except OSError as exc:
        raise SystemExit(f"replay: {exc} (make it with part 1: see docs/replay.md)") from None
    pods = trace.read_pods(args.trace / args.pods_file)
    window = select_window(
        pods, length=round(args.window_hours * 3600), teams=args.teams, seed=args.seed
    )
    names = {p.name for p in window.pods}
    for run in runs:
        seen = {j["name"] for j in run["jobs"]}
        if not seen <= names or len(seen) + run["refused"] != len(names):
            raise SystemExit(
                f"replay: run {run['run_id']} is not this window ({len(names)} pods): pass part "
                "1's --window-hours, --teams and --seed"
            )
    base = fleet.Fleet(args.nodes, args.gpus_per_node, args.model)
    keys = list(dict.fromkeys(r["policy"] for r in runs))
    unknown = [k for k in keys if k not in CLUSTER_ROWS]
    if unknown:
        raise SystemExit(f"replay: {args.observations} has rows {''.join(unknown)}, not part 1's")
    # each row as the cluster ran it: slice lines, fair sharing (calibrate.run_jobs)
    setups = {
        k: fleet.set_up(window, CLUSTER_ROWS[k], base, args.teams, as_cluster=True) for k in keys
    }
    zero = {k: calibrate.run_jobs(window, setups[k], calibrate.Harness(), args.seed) for k in keys}
    fit = calibrate.fit_harness(
        runs,
        immediate={k: zero[k][2] for k in keys},
        no_borrowing={k for k in keys if not CLUSTER_ROWS[k].borrowing},
        arrivals={p.name: p.arrival for p in window.pods},
        asked_run={p.name: p.run for p in window.pods},
    )
    say(f"calibrate: {len(runs)} cluster runs from {args.observations}")
    figures = []
    for k in keys:
        fitted = calibrate.run_jobs(window, setups[k], fit.harness, args.seed)
        mine = [r for r in runs if r["policy"] == k]
        figures.append(
            calibrate.PolicyFigures(
                key=k,
                title=CLUSTER_ROWS[k].title,
                cluster_alloc=[r["alloc_milli"] for r in mine],
                cluster_started=[r["started"] for r in mine],
                cluster_refused=[r["refused"] for r in mine],
                cluster_preempted=[sum(j["preemptions"] for j in r["jobs"]) for r in mine],
                zero=_figures(zero[k]),
                fitted=_figures(fitted),
            )
        )
    return calibrate.describe(fit) + "\n" + calibrate.table(figures, fit)


def _figures(simulated) -> tuple[float, int, int, int]:
    result, started, _ = simulated
    return result.alloc_milli, started, result.refused, result.preemptions


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def say(msg: str) -> None:
        print(f"[replay] {msg}", flush=True)

    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    sections = [f"# Trace replay, {when} on {machine()}\n"]
    try:
        if args.part == "simulate":  # pure: never reaches part 1's cluster or database
            table = run_simulate(args, say)
            print("\n" + table, flush=True)
            sections.append("## Simulated at trace time (no cluster)\n\n" + table)
        if args.part == "calibrate":  # reads part 1's file; no cluster, no database
            table = run_calibrate(args, say)
            print("\n" + table, flush=True)
            sections.append("## Calibration: the simulator against part 1's cluster\n\n" + table)
        if args.part in ("all", "overtime"):
            table, _ = run_overtime(args, say)
            print("\n" + table, flush=True)
            sections.append("## Part 1: over time on the local cluster\n\n" + table)
        if args.part in ("all", "packing"):
            table = run_packing(args, say)
            print("\n" + table, flush=True)
            sections.append("## Part 2: static packing (FGD's method)\n\n" + table)
    except TraceError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    (args.out / "replay.md").write_text("\n".join(sections))
    say(f"done in {time.monotonic() - started:.0f} s; tables in {args.out / 'replay.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
