"""The stack a fault run owns: its own PostgreSQL cluster (Debian's pg_createcluster, port
55432), its own Redis (on a free port), the portal's web (gunicorn), worker and beat processes, a
Prometheus scraping a DCGM stand-in; and the shared local Kubernetes cluster, under a portal
instance of its own (`faults`). Nothing here touches the developer's database or broker."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import requests

from localcluster import portal_account

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / ".local" / "faults"
VENV = REPO / ".venv" / "bin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# PostgreSQL's port is the cluster's (pg_createcluster, once); Redis and the web take any free
# port, so the run never collides with whatever else listens on this machine.
PG_PORT, REDIS_PORT, WEB_PORT = 55432, _free_port(), _free_port()
PG_CLUSTER = "gpu-portal-faults"
DB = "gpu_portal_faults"
INSTANCE = "faults"

# Periods short enough that a fault and its recovery fit in a minute.
PERIODS = {
    "RECONCILE_ALL_EVERY_S": "10",
    "SYNC_WORKLOADS_EVERY_S": "3",
    "SYNC_INVENTORY_EVERY_S": "15",
    "SYNC_QUEUES_EVERY_S": "10",
    "EXPIRE_GRANTS_EVERY_S": "2",
    "METERING_INGEST_EVERY_S": "15",
    "DELETE_LEFTOVERS_EVERY_S": "10",
    "BEAT_LOCK_TTL_S": "10",
    # a rollout step's limits, and so how soon a rollout whose worker died counts as stuck
    "MIG_NODE_TIMEOUT_S": "10",
    "MIG_DRAIN_TIMEOUT_S": "20",
    # Elastic layouts off: they act on any pod the shared local cluster has left waiting, and
    # their rollouts would cordon nodes the rollout fault counts (each cordoned once).
    "ELASTIC_LAYOUTS_ON": "false",
}


def say(msg: str) -> None:
    print(f"[faults] {msg}", flush=True)


def _root() -> bool:
    return os.geteuid() == 0


def as_postgres(argv: list[str]) -> list[str]:
    if _root():
        return ["su", "postgres", "-c", shlex.join(argv)]
    return ["sudo", "-u", "postgres", *argv]


def as_root(argv: list[str]) -> list[str]:
    return argv if _root() else ["sudo", *argv]


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


def wait_until(what: str, check, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception:  # noqa: BLE001 - a probe of something that may be down
            value = None
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what}: not after {timeout:.0f} s")


class Postgres:
    """A second Debian PostgreSQL cluster, stopped and started by pg_ctlcluster."""

    def __init__(self):
        self.version = sorted(p.name for p in Path("/usr/lib/postgresql").iterdir())[-1]
        self.url = f"postgres://gpu_portal:gpu_portal@127.0.0.1:{PG_PORT}/{DB}"

    def _ctl(self, action: str, *extra: str) -> None:
        run(as_root(["pg_ctlcluster", self.version, PG_CLUSTER, action, *extra]))

    def _psql(self, sql: str) -> str:
        argv = ["psql", "-p", str(PG_PORT), "-v", "ON_ERROR_STOP=1", "-qtAc", sql]
        return run(as_postgres(argv), cwd="/").stdout.strip()

    def ready(self) -> bool:
        return (
            subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(PG_PORT)]).returncode
            == 0
        )

    def fresh(self) -> None:
        clusters = run(["pg_lsclusters", "-h"]).stdout
        if not any(line.split()[1:2] == [PG_CLUSTER] for line in clusters.splitlines()):
            say(f"creating PostgreSQL cluster {PG_CLUSTER} on port {PG_PORT} (first run only)")
            run(
                as_root(
                    [
                        "pg_createcluster",
                        self.version,
                        PG_CLUSTER,
                        "-p",
                        str(PG_PORT),
                        "-o",
                        "fsync=off",
                        "-o",
                        "synchronous_commit=off",
                    ]
                )
            )
        self.start()
        if self._psql("SELECT 1 FROM pg_roles WHERE rolname='gpu_portal'") != "1":
            self._psql("CREATE ROLE gpu_portal LOGIN CREATEDB PASSWORD 'gpu_portal'")
        self._psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        self._psql(f"CREATE DATABASE {DB} OWNER gpu_portal")

    def start(self) -> None:
        if not self.ready():
            self._ctl("start")
        wait_until("PostgreSQL up", self.ready, 30)

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")

    def is_up(self) -> bool:
        return self.ready()


class Redis:
    """Redis without persistence unless asked: a restart keeps queued messages only when the
    fault saves them first."""

    def __init__(self):
        self.dir = WORK / "redis"
        self.proc: subprocess.Popen | None = None
        self.url = f"redis://127.0.0.1:{REDIS_PORT}"

    def _cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["redis-cli", "-p", str(REDIS_PORT), *args], capture_output=True, text=True
        )

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        log = open(WORK / "redis.log", "ab")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(REDIS_PORT),
                "--dir",
                str(self.dir),
                "--dbfilename",
                "dump.rdb",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until("Redis up", lambda: self._cli("ping").stdout.strip() == "PONG", 15, 0.1)

    def stop(self, *, keep: bool) -> None:
        """Shut down; `keep` saves what is queued to disk first (a clean restart)."""
        if not keep:
            self._cli("flushall")
            (self.dir / "dump.rdb").unlink(missing_ok=True)
        self._cli("shutdown", "save" if keep else "nosave")
        if self.proc is not None:
            self.proc.wait(timeout=15)

    def queued(self) -> int:
        """Messages waiting in the portal's queues (kombu keeps a list per queue)."""
        total = 0
        for queue in ("default", "reconcile", "metering", "notify", "follow"):
            out = self._cli("-n", "0", "llen", queue).stdout.strip()
            total += int(out) if out.isdigit() else 0
        return total


class Proc:
    """One portal process, killed with SIGKILL when a fault says so."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]):
        self.name, self.argv, self.env = name, argv, env
        self.proc: subprocess.Popen | None = None
        self.log = WORK / f"{name}.log"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            log.write(f"\n--- {time.strftime('%H:%M:%S')} start\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill9()


def portal_env(prometheus_url: str, redis_url: str, db_url: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_", "CELERY_", "TEST_", "PORTAL_", "DJANGO_"))
    }
    env.update(PERIODS)
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings.dev",
        DEBUG="false",
        DATABASE_URL=db_url,
        DB_CONN_MAX_AGE="0",
        CELERY_BROKER_URL=f"{redis_url}/0",
        CACHE_URL=f"{redis_url}/1",
        PORTAL_INSTANCE=INSTANCE,
        TENANT_NAMESPACE_PREFIX=f"{INSTANCE}-",
        # the portal acts as the Helm chart's ServiceAccount, not as the cluster's admin
        KUBECONFIG=str(portal_account.kubeconfig()),
        PROMETHEUS_URL=prometheus_url,
        RECONCILE_ON_COMMIT="true",
        LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
    )
    return env


class Portal:
    def __init__(self, env: dict[str, str]):
        self.env = env
        self.base = f"http://127.0.0.1:{WEB_PORT}"
        self.web = Proc(
            "web",
            [
                str(VENV / "gunicorn"),
                "portal.wsgi",
                "-b",
                f"127.0.0.1:{WEB_PORT}",
                "-w",
                "2",
                "--threads",
                "4",
                "--timeout",
                "60",
            ],
            env,
        )
        self.worker = Proc("worker", self._worker_argv(), env)
        self.beats = [self._beat(0)]

    def _worker_argv(self) -> list[str]:
        return [
            str(VENV / "celery"),
            "-A",
            "portal",
            "worker",
            "-Q",
            "default,reconcile,metering,notify,follow",
            "-P",
            "threads",
            "-c",
            "4",
            "-n",
            "faults@%h",
            "--without-gossip",
            "--without-mingle",
            "--loglevel",
            "INFO",
        ]

    def _beat(self, n: int) -> Proc:
        schedule = WORK / f"beat-{n}.schedule"
        return Proc(
            f"beat-{n}",
            [
                str(VENV / "celery"),
                "-A",
                "portal",
                "beat",
                "-s",
                str(schedule),
                "--pidfile=",
                "--loglevel",
                "INFO",
            ],
            self.env,
        )

    def start(self) -> None:
        for proc in (self.web, self.worker, *self.beats):
            proc.start()
        wait_until(
            "the web answering /readyz",
            lambda: requests.get(f"{self.base}/readyz", timeout=2).status_code == 200,
            60,
        )

    def stop(self) -> None:
        for proc in (*self.beats, self.worker, self.web):
            proc.stop()

    def restart_beats(self, count: int) -> None:
        """Kill the beat(s) with SIGKILL and start `count` of them at once."""
        for beat in self.beats:
            beat.kill9()
        self.beats = [self._beat(n) for n in range(count)]
        for beat in self.beats:
            beat.start()


def clean_work_dir() -> None:
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
