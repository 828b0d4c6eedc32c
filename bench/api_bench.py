"""The workload API under load: p50/p99 latency, throughput and gunicorn's CPU per call of submit
and status calls from 50 concurrent clients (wrk, a second process) against gunicorn and
PostgreSQL, next to a floor (bench/floor.py: token authentication and one query on a primary key)
on the same server; and the time from submit to pod Running on the local cluster, next to
creating the same Job directly on the API server, in the same run.

The server is the one the Helm chart runs: `gunicorn -c deploy/gunicorn.conf.py` with the web
container's environment from the chart's values (`web.workers`, `web.threads`, `web.env`).

Goals (issues 5 and 19, and submit under load): p99 < 250 ms for submit and status at 50 paced
and 50 saturated clients with zero errors; CPU per call ≤ 2 × the floor for status and ≤ 3 × for
submit; submit-to-Running ≤ direct + 1 s at p50.

`--profile DIR` samples the workers with py-spy during each run (collapsed stacks in DIR and
their top frames printed).

Runs in a throwaway database, its own Redis database as broker (purged), its own instance label
and namespace prefix, and deletes every namespace it made at the end.

Its rooms: `bench/api_fixture.py` (the bench's instance, broker, seed data and clean-up),
`bench/api_server.py` (gunicorn as the chart runs it), `bench/api_wrk.py` (the load driver),
`bench/api_running.py` (submit to Running) and `bench/api_report.py` (the tables and goals).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

from bench import profile
from bench.api_fixture import (
    IMAGE,
    INSTANCE,
    LOAD_TENANTS,
    MODEL,
    PREFIX,
    clean_up,
    purge_broker,
    seed_tenants,
)
from bench.api_report import print_report
from bench.api_running import to_running
from bench.api_server import (
    GUNICORN_CONF,
    VENV_BIN,
    WSGI_APP,
    chart_web_env,
    cpu_seconds,
    describe,
    free_port,
    served_ms,
    start_server,
    stop_server,
    wait_http,
)
from bench.api_wrk import WRK_FLOOR, WRK_STATUS, WRK_SUBMIT, run_wrk
from catalog.models import ResourceClass
from catalog.services import ensure_resource_classes
from localcluster import cluster
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.runs import reconcile_cluster_objects, reconcile_tenant


def run(
    *, clients: int = 50, seconds: int = 10, samples: int = 10, profile_dir: Path | None = None
) -> int:
    if shutil.which("wrk") is None:
        print("api bench: wrk is not installed (apt-get install -y wrk); skipped")
        return 1
    cluster.up()
    settings.PORTAL_INSTANCE = INSTANCE
    settings.TENANT_NAMESPACE_PREFIX = PREFIX
    kube = KubeGateway.from_kubeconfig(str(cluster.KUBECONFIG))
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = "gpu_portal_bench_api"  # not the test suite's
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    server = chart_web_env()
    gunicorn = worker = None
    workdir = Path(tempfile.mkdtemp(prefix="api-bench-"))
    try:
        clean_up(kube, wait=True)  # what a previous, interrupted run left
        ensure_resource_classes([MODEL])
        rc = ResourceClass.objects.get(gpu_model=MODEL, resource_name="nvidia.com/mig-3g.40gb")
        run_tenant, token, ids = seed_tenants(rc)
        reconcile_cluster_objects(kube)
        reconcile_tenant(kube, run_tenant.pk)
        connection.close()  # the children use the database; this process waits

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        # Exactly what the chart's web container runs; only the port is the bench's.
        gunicorn = start_server(
            [str(VENV_BIN / "gunicorn"), "-c", GUNICORN_CONF, WSGI_APP],
            workdir / "gunicorn.log",
            PORT=str(port),
        )
        wait_http(f"{base}/api/schema/?format=json")
        print(f"gunicorn on {base} ({describe(server)}); wrk: {clients} clients", flush=True)

        ids_lua = ", ".join(map(str, ids))
        status_script = WRK_STATUS % {"ids": ids_lua, "token": token}
        floor_script = WRK_FLOOR % {"ids": ids_lua, "token": token}
        run_wrk(base, status_script, clients, 2, workdir, "warm")
        run_wrk(base, floor_script, clients, 1, workdir, "warm-floor")
        load = {}
        for paced in (True, False):
            mode = "paced" if paced else "saturated"
            submit_script = WRK_SUBMIT % {
                "token": token,
                "tenants": LOAD_TENANTS,
                "image": IMAGE,
                "rc": rc.slug,
                "run": mode[0],  # names unique across runs: p0-1, s0-1, ...
            }
            for call, script in (
                ("floor", floor_script),
                ("status", status_script),
                ("submit", submit_script),
            ):
                label = f"{call}-{mode}"
                sampler = profile.start(gunicorn.pid, profile_dir, label) if profile_dir else None
                cpu = cpu_seconds(gunicorn.pid)
                log_from = (workdir / "gunicorn.log").stat().st_size
                d = run_wrk(base, script, clients, seconds, workdir, label, paced=paced)
                d["cpu_ms"] = (cpu_seconds(gunicorn.pid) - cpu) * 1000 / max(1, d["requests"])
                d["server_ms"] = served_ms(workdir / "gunicorn.log", log_from)
                if sampler is not None:
                    profile.stop(sampler)
                load[call, mode] = d
                print(f"  {call} {mode}: {d['requests']} calls", flush=True)
        purge_broker()  # nothing creates the load's jobs on the cluster
        if any(d["errors"] for d in load.values()):
            tail = (workdir / "gunicorn.log").read_text(errors="replace").splitlines()[-40:]
            print("gunicorn's log, last lines:", *tail, sep="\n  ", flush=True)

        worker = start_server(
            [
                str(VENV_BIN / "celery"),
                "-A",
                "portal",
                "worker",
                "-Q",
                "reconcile",
                "--concurrency",
                "2",
                "--loglevel",
                "WARNING",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            workdir / "worker.log",
        )
        time.sleep(4)  # the worker connects to the broker
        via_portal, direct = to_running(kube, base, token, run_tenant, rc, samples)
        print(f"  submit to Running: {samples} + {samples} samples", flush=True)
    finally:
        stop_server(worker)
        stop_server(gunicorn)
        try:
            purge_broker()
        except Exception as exc:  # noqa: BLE001 (report, go on cleaning)
            print(f"could not purge the bench broker: {exc}")
        clean_up(kube)
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)
        shutil.rmtree(workdir, ignore_errors=True)

    if profile_dir:
        for (call, mode), _ in load.items():
            profile.report(profile_dir, f"{call}-{mode}")
    print_report(
        load,
        via_portal,
        direct,
        clients=clients,
        seconds=seconds,
        samples=samples,
        server=server,
    )
    return 0
