"""Start, stop and inspect the local control plane: etcd, kube-apiserver, JobSet, Kueue,
controller-manager, scheduler, kwok and the GPU simulator, as detached processes with pid files.

Everything lives under <repo>/.local/cluster (state, logs, pids, PKI); the admin kubeconfig is
<repo>/.local/kubeconfig. `up` is idempotent: running components are left alone, except the GPU
simulator when its code changed since it started (it is restarted; its state is in the nodes'
annotations), and the fleet's nodes are brought up to date (fleet.ensure_nodes).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from kubernetes import client

from . import build, dra_node, fleet, jobset, kueue, node_addons, node_stack, realnode
from .base import (  # noqa: F401 (cluster.X is how callers and tests name these)
    KUBECONFIG,
    LOCAL_DIR,
    LOGS,
    PACKAGE_DIR,
    PKI,
    REPO_ROOT,
    RUN,
    STATE_DIR,
    ClusterError,
    api_client,
    api_port,
    ensure_serving_cert,
    etcd_ports,
    http_ok,
    jobset_ports,
    kueue_ports,
    log,
    openssl,
    server_url,
)
from .components import CONFIG_FILES, Component, component_specs, simulator_sources
from .pki import admin_token, ensure_pki, write_kubeconfig

# --- processes -------------------------------------------------------------------------------


def _code_version(comp: Component) -> str:
    """A digest of the simulator's sources, of the configuration files a component read or of
    the controller-manager's command line ("" for the other built binaries: their tag pins
    them)."""
    if comp.name in CONFIG_FILES:
        digest = hashlib.sha256()
        for path in CONFIG_FILES[comp.name]:
            digest.update(path.read_bytes() if path.exists() else b"")
        return digest.hexdigest()[:16]
    if comp.name in ("kube-controller-manager", "kube-apiserver"):
        # its controllers and their periods are its command line: a checkout that adds one
        # (the autoscaler) restarts it once
        return hashlib.sha256("\0".join(comp.argv).encode()).hexdigest()[:16]
    if comp.name == "kueue":
        # its configuration is made by code (kueue.config), not read from a checked-in file
        config = json.dumps([kueue.config(), kueue.FEATURE_GATES], sort_keys=True)
        return hashlib.sha256(config.encode()).hexdigest()[:16]
    if comp.name == "jobset":
        # likewise (jobset.config), and its flags
        config = json.dumps([jobset.config(), comp.argv], sort_keys=True)
        return hashlib.sha256(config.encode()).hexdigest()[:16]
    if comp.name != "gpu-simulator":
        return ""
    digest = hashlib.sha256()
    for path in simulator_sources():
        # the name too: a file added or removed changes the version
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _versionfile(name: str) -> Path:
    return RUN / f"{name}.version"


def _stale(comp: Component) -> bool:
    """Runs older code than the checkout's (or code from before versions were recorded)."""
    version = _code_version(comp)
    if not version:
        return False
    try:
        return _versionfile(comp.name).read_text() != version
    except OSError:
        return True


def _pidfile(name: str) -> Path:
    return RUN / f"{name}.pid"


def running_pid(comp: Component) -> int | None:
    """The component's pid if it runs (checked against /proc cmdline, so reused pids miss)."""
    try:
        pid = int(_pidfile(comp.name).read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError):
        return None
    if status == "Z":
        return None
    want = comp.argv[2] if comp.name == "gpu-simulator" else comp.argv[0]
    return pid if want.encode() in cmdline else None


def start(comp: Component) -> subprocess.Popen:
    LOGS.mkdir(parents=True, exist_ok=True)
    RUN.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **(comp.env or {}))
    with open(LOGS / f"{comp.name}.log", "ab") as log:
        log.write(f"\n--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {comp.name}\n".encode())
        log.flush()
        # A new session detaches the process from our terminal, so it outlives `up`.
        proc = subprocess.Popen(
            comp.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO_ROOT,
            env=env,
            close_fds=True,
        )
    _pidfile(comp.name).write_text(str(proc.pid))
    if version := _code_version(comp):
        _versionfile(comp.name).write_text(version)
    return proc


def stop(comp: Component, timeout: float = 15) -> bool:
    pid = running_pid(comp)
    if pid is None:
        _pidfile(comp.name).unlink(missing_ok=True)
        return False
    _end(pid, timeout)
    _pidfile(comp.name).unlink(missing_ok=True)
    return True


def _end(pid: int, timeout: float) -> None:
    """SIGTERM, then SIGKILL if it still runs after `timeout` s."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    """Runs (a zombie, which our own child becomes until reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _tail(name: str, lines: int = 15) -> str:
    try:
        text = (LOGS / f"{name}.log").read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n    ".join(text[-lines:])


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def etcd_healthy() -> bool:
    return http_ok(f"http://127.0.0.1:{etcd_ports()[0]}/health")


def apiserver_ready() -> bool:
    return (PKI / "ca.crt").is_file() and http_ok(f"{server_url()}/readyz", admin_token())


def wait_until(
    what: str, check, comp: Component, timeout: float, proc: subprocess.Popen | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        # Our own child: poll() (its /proc cmdline is ours until exec); else the pid file.
        gone = proc.poll() is not None if proc else running_pid(comp) is None
        if gone:
            raise ClusterError(
                f"{comp.name} exited while starting; its log "
                f"({LOGS / (comp.name + '.log')}) ends with:\n    " + _tail(comp.name)
            )
        if time.monotonic() > deadline:
            raise ClusterError(
                f"{what} not ready after {timeout:.0f} s; {comp.name} log:\n    " + _tail(comp.name)
            )
        time.sleep(0.2)


def up(large: int | None = None, timeout: float = 180) -> None:
    """Build if needed, start whatever is not running, seed the fleet, wait until Ready."""
    t0 = time.monotonic()
    bins = build.ensure_built()
    if realnode.enabled():
        bins = {**bins, **node_stack.ensure_built()}
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    # Two callers at once (make cluster and a test run) must not both start etcd.
    with open(STATE_DIR / ".up.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _up_locked(bins, large, timeout, t0)


def _free_ports(comp: Component) -> None:
    """Fail early, with the port's name, if another process holds one the component needs."""
    ports = {
        "etcd": {"etcd": etcd_ports()[0]},
        "kube-apiserver": {"the API server": api_port()},
        "kueue": dict(
            zip(("Kueue webhook", "Kueue health", "Kueue metrics"), kueue_ports(), strict=True)
        ),
        "jobset": dict(
            zip(("JobSet webhook", "JobSet health", "JobSet metrics"), jobset_ports(), strict=True)
        ),
    }.get(comp.name, {})
    for what, port in ports.items():
        if _port_open(port):
            raise ClusterError(
                f"port {port} ({what}) is taken by another process; "
                "stop it or set LOCALCLUSTER_PORT to another API port"
            )


def _other_build_pid(comp: Component) -> int | None:
    """The pid of this component run from another build (an older version's cache folder)."""
    try:
        pid = int(_pidfile(comp.name).read_text())
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    binary = Path(comp.argv[0])
    if comp.name == "gpu-simulator" or argv0 == str(binary):
        return None
    same_cache = Path(argv0).parent.parent == binary.parent.parent
    return pid if same_cache and Path(argv0).name == binary.name else None


STACK_FILE = STATE_DIR / "stack"  # the versions that made the state (etcd's data among it)


def _follow_new_stack(specs: list[Component]) -> None:
    """After a version change (a pull that moves Kubernetes, etcd or Kueue), stop what runs
    from the old builds and start from empty state: the local cluster is a test bed whose
    contents the portal's reconcile makes again from PostgreSQL, and an etcd data dir is not
    carried across minor versions here (`reset` would do the same by hand)."""
    stack = " ".join(sorted(c.tag for c in build.components()))
    for comp in reversed(specs):
        if (pid := _other_build_pid(comp)) is not None:
            log(f"stopping {comp.name} (pid {pid}): it runs an older build")
            _end(pid, 15)
            _pidfile(comp.name).unlink(missing_ok=True)
    known = STACK_FILE.read_text() if STACK_FILE.is_file() else None
    if known != stack and (STATE_DIR / "etcd").exists():
        was = known or "versions not recorded"
        log(f"the cluster's versions changed ({was} -> {stack}): starting from empty state")
        for comp in reversed(specs):
            stop(comp)
        shutil.rmtree(STATE_DIR / "etcd")
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    STACK_FILE.write_text(stack)


def _up_locked(bins: dict[str, Path], large: int | None, timeout: float, t0: float) -> None:
    ensure_pki()
    write_kubeconfig()
    if realnode.enabled():
        realnode.prepare_host(bins)
        realnode.node_kubeconfig()
        ensure_serving_cert(
            PKI / "kubelet-client", "kube-apiserver-kubelet-client", usage="clientAuth"
        )
    specs = component_specs(bins)
    _follow_new_stack(specs)
    api_comp = next(c for c in specs if c.name == "kube-apiserver")
    kueue_proc = jobset_proc = None
    for comp in specs:
        if running_pid(comp) is not None:
            if not _stale(comp):
                continue
            log(f"restarting {comp.name}: its code or configuration changed since it started")
            stop(comp)
        _free_ports(comp)
        if comp.name == "kueue":
            # Its CRDs, cert, config and webhooks first; the API server may have been running.
            wait_until("kube-apiserver /readyz", apiserver_ready, api_comp, 120)
            prep = time.monotonic()
            api = api_client()
            try:
                kueue.prepare(api)
            finally:
                api.close()
            log(f"applied Kueue's CRDs and webhooks in {time.monotonic() - prep:.1f} s")
        elif comp.name == "jobset":
            # Its CRD (before Kueue starts), cert, config and webhooks.
            wait_until("kube-apiserver /readyz", apiserver_ready, api_comp, 120)
            prep = time.monotonic()
            api = api_client()
            try:
                jobset.prepare(api)
            finally:
                api.close()
            log(f"applied JobSet's CRD and webhooks in {time.monotonic() - prep:.1f} s")
        if comp.name == "kubelet":
            # Its pods' images first: none can be pulled from outside.
            node_addons.build_and_load(bins)
        log(f"starting {comp.name}")
        proc = start(comp)
        if comp.name == "etcd":
            wait_until("etcd", etcd_healthy, comp, 60, proc)
        elif comp.name == "kube-apiserver":
            wait_until("kube-apiserver /readyz", apiserver_ready, comp, 120, proc)
        elif comp.name == "containerd":
            wait_until("containerd", realnode.socket_path().exists, comp, 30, proc)
        elif comp.name == "kueue":
            kueue_proc = proc  # waited for below: its start overlaps the fleet's
        elif comp.name == "jobset":
            jobset_proc = proc  # likewise
    if not apiserver_ready():
        wait_until("kube-apiserver /readyz", apiserver_ready, api_comp, 120)
    api = api_client()
    try:
        names = fleet.ensure_nodes(api, large)
        fleet.wait_nodes_ready(api, names, timeout)
    finally:
        api.close()
    kueue_comp = next(c for c in specs if c.name == "kueue")
    wait_until("Kueue /readyz", kueue.ready, kueue_comp, 120, kueue_proc)
    wait_until("Kueue's resources listed", kueue.storage_ready, kueue_comp, 60)
    jobset_comp = next(c for c in specs if c.name == "jobset")
    wait_until("JobSet /readyz", jobset.ready, jobset_comp, 120, jobset_proc)
    if realnode.enabled():
        _real_node_ready(bins)
    log(
        f"cluster up in {time.monotonic() - t0:.1f} s: {server_url()}, {len(names)} nodes; "
        f"KUBECONFIG={KUBECONFIG}"
    )


def _real_node_ready(bins: dict[str, Path]) -> None:
    start_at = time.monotonic()
    node_addons.build_and_load(bins)  # nothing to do unless an image changed while it ran
    api = api_client()
    try:
        node_addons.apply_addons(api)
        node_addons.wait_ready(api)
    finally:
        api.close()
    log(
        f"real node {realnode.NODE_NAME} Ready with DNS and NetworkPolicy in "
        f"{time.monotonic() - start_at:.1f} s"
    )


def real_node(gpus: str | None) -> int:
    """Print which nodes run processes and which pretend to; with `gpus` (MODEL:N), make the real
    node play N GPUs of MODEL first (make run: the demo's work really runs there)."""
    api = api_client()
    try:
        if gpus and realnode.enabled():
            model, _, count = gpus.partition(":")
            node_addons.advertise_gpus(api, model, int(count or 1))
        for node in client.CoreV1Api(api).list_node().items:
            labels = node.metadata.labels or {}
            real = labels.get(realnode.REAL_NODE_LABEL) == "true"
            devices = {
                k: v for k, v in (node.status.allocatable or {}).items() if k.startswith("nvidia")
            }
            what = (
                "real: its pods' processes run" if real else "simulated (KWOK): pods only pretend"
            )
            shown = ", ".join(f"{v} {k}" for k, v in sorted(devices.items())) or "no GPUs"
            print(f"  {node.metadata.name:24} {what}; {shown}")
    finally:
        api.close()
    return 0


def dra(gpus: str, name: str, *, remove: bool = False) -> int:
    """Add (or remove) a KWOK node whose GPUs are served through DRA (dra_node.py)."""
    api = api_client()
    try:
        if remove:
            dra_node.remove(api, name)
            print(f"  {name} removed, its ResourceSlices with it")
            return 0
        model, _, count = gpus.partition(":")
        dra_node.ensure(api, model, int(count or 1), name)
        print(f"  {name}: {count or 1} x {model} served through DRA (ResourceSlices, no layouts)")
    finally:
        api.close()
    return 0


def _all_binaries() -> dict[str, Path]:
    return {**build.binaries(), **node_stack.binaries()}


def fresh_kwok() -> None:
    """Restart KWOK, for a measurement. After hours of test runs (thousands of pods) a KWOK
    process ended lone Job pods late (`sleep 30` ran 54 s, `sleep 60` 108 s) where a fresh one
    ended them on the second; a benchmark or replay should not measure how long the local
    cluster has been up. (Under load KWOK also restarted a pod's delay whenever the pod
    changed; the stages now count from the pod's start: localcluster/kwok-stages.yaml.)"""
    comp = next(c for c in component_specs(build.binaries()) if c.name == "kwok")
    stop(comp)
    up()


def down() -> None:
    for comp in reversed(component_specs(_all_binaries())):
        if stop(comp):
            log(f"stopped {comp.name}")
        if comp.name == "kubelet":
            # the containers outlive the kubelet and containerd (their shims run on)
            if stopped := realnode.stop_containers(_all_binaries()["runc"]):
                log(f"stopped {stopped} containers of the real node")


def reset() -> None:
    down()
    realnode.unmount_all()
    if STATE_DIR.exists():
        shutil.rmtree(STATE_DIR)
    KUBECONFIG.unlink(missing_ok=True)
    log(f"removed {STATE_DIR} and {KUBECONFIG}")


def status() -> int:
    """Print what runs; exit code 0 when everything runs and the API server, Kueue and JobSet
    are ready."""
    ok = True
    for comp in component_specs(_all_binaries()):
        pid = running_pid(comp)
        ok &= pid is not None
        state = f"running (pid {pid})" if pid else "stopped"
        print(f"{comp.name:24} {state}")
    ready = apiserver_ready()
    ok &= ready
    print(f"{'api server':24} {server_url()} {'ready' if ready else 'not ready'}")

    webhook, health, metrics = kueue_ports()
    kueue_ready = kueue.ready()
    ok &= kueue_ready
    print(
        f"{'kueue webhooks':24} {'ready' if kueue_ready else 'not ready'} (webhooks :{webhook}, "
        f"/readyz :{health}, metrics :{metrics}, config {kueue.CONFIG})"
    )
    webhook, health, metrics = jobset_ports()
    jobset_ready = jobset.ready()
    ok &= jobset_ready
    print(
        f"{'jobset webhooks':24} {'ready' if jobset_ready else 'not ready'} (webhooks :{webhook}, "
        f"/readyz :{health}, metrics :{metrics}, config {jobset.CONFIG})"
    )
    print(
        f"{'binaries':24} {'built' if build.all_built() else 'not built'} "
        f"({build.cache_root() / 'bin'})"
    )
    if ready:
        api = api_client()
        try:
            nodes = client.CoreV1Api(api).list_node().items
        finally:
            api.close()
        ready_nodes = sum(
            1
            for n in nodes
            for c in n.status.conditions or []
            if c.type == "Ready" and c.status == "True"
        )
        print(f"{'nodes':24} {ready_nodes}/{len(nodes)} Ready")
        print(f"{'kubeconfig':24} {KUBECONFIG}")
    return 0 if ok else 1
