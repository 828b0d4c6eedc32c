"""The gunicorn server the API bench measures, started as the Helm chart's web container runs it
(`gunicorn -c deploy/gunicorn.conf.py` with the environment of the chart's `web` values), in the
bench's database, broker and instance: a free port, the children's environment, starting and
stopping a process group, waiting for the server to answer, the CPU time the master and its
workers have used, and how long gunicorn served each call by its access log.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml
from django.db import connection

from bench.api_fixture import BROKER, INSTANCE, PREFIX
from localcluster import cluster

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
CHART_VALUES = ROOT / "deploy/helm/gpu-portal/values.yaml"
GUNICORN_CONF = "deploy/gunicorn.conf.py"  # what the chart's web container and the image run
WSGI_APP = "portal.wsgi:application"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _database_url() -> str:
    d = connection.settings_dict
    host, port = d["HOST"] or "127.0.0.1", d["PORT"] or 5432
    return f"postgres://{d['USER']}:{d['PASSWORD']}@{host}:{port}/{d['NAME']}"


def chart_web_env(values_path: Path = CHART_VALUES) -> dict[str, str]:
    """The web container's server settings as the chart sets them (templates/web-deployment.yaml):
    WEB_WORKERS, WEB_THREADS, WEB_KEEPALIVE from `web`, then `web.env`."""
    web = yaml.safe_load(values_path.read_text())["web"]
    env = {
        "WEB_WORKERS": str(web["workers"]),
        "WEB_THREADS": str(web["threads"]),
        "WEB_KEEPALIVE": str(web["keepalive"]),
    }
    env.update({entry["name"]: str(entry["value"]) for entry in web.get("env") or []})
    return env


def _child_env() -> dict[str, str]:
    return {
        **os.environ,
        # The test settings and the floor's URL (bench/settings.py).
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "DATABASE_URL": _database_url(),
        "TEST_CELERY_BROKER_URL": BROKER,
        "TEST_PORTAL_INSTANCE": INSTANCE,
        "TEST_NAMESPACE_PREFIX": PREFIX,
        "KUBECONFIG": str(cluster.KUBECONFIG),
        "API_THROTTLE_RATE": "1000000/min",  # measure the portal, not its throttle
        **chart_web_env(),
    }


def describe(server: dict[str, str]) -> str:
    return (
        f"-c deploy/gunicorn.conf.py, gthread, {server['WEB_WORKERS']} workers × "
        f"{server['WEB_THREADS']} threads, keep-alive {server['WEB_KEEPALIVE']} s, as the chart"
    )


def start_server(cmd: list[str], log: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**_child_env(), **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_server(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def cpu_seconds(master_pid: int) -> float:
    """CPU time (user + system) the gunicorn master and its workers have used so far: the
    server's cost per call, whatever else the machine is running. Workers that gunicorn has
    replaced (max_requests) count through the master's reaped-children times."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(stat.parent.name), int(fields[1])
        if master_pid in (pid, ppid):
            total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
        if pid == master_pid:
            total += int(fields[13]) + int(fields[14])  # cutime, cstime: reaped workers
    return total / os.sysconf("SC_CLK_TCK")


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()  # noqa: S310 (a local URL)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def served_ms(log: Path, offset: int) -> list[float]:
    """How long gunicorn took over each call logged after `offset` (its access log's
    duration: from reading the request to the answer written). What wrk measures beyond it
    was spent waiting before gunicorn read the request, or in wrk itself."""
    with log.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    served = []
    for line in lines:
        if '"gunicorn.access"' in line:
            try:
                served.append(float(json.loads(line)["duration_ms"]))
            except (ValueError, KeyError):
                continue
    return served
