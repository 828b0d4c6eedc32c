"""Build the control-plane binaries from Go modules with the local Go toolchain.

Nothing is downloaded but Go modules (through the Go module proxy). Binaries are cached by
version under ${XDG_CACHE_HOME:-~/.cache}/gpu-portal/bin/<tag>/, so only the first run pays the
cold build (see localcluster/README.md for the cold timings measured on 2 cores);
later runs find the finished directory at once. Kueue's CRDs and webhook manifest are copied
next to its binary, so starting the cluster needs neither Go nor the module cache.
"""

from __future__ import annotations

import fcntl
import glob
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
# kubeadm's default etcd for Kubernetes 1.36 (cmd/kubeadm/app/constants: 3.6.8-0).
ETCD_VERSION = "v3.6.8"
KWOK_VERSION = "v0.8.0"  # its consts.KubeVersion is 1.36.1
KUEUE_VERSION = "v0.19.2"
# The JobSet controller: the version Kueue v0.19.2's go.mod pins (its JobSet integration is
# built and tested against it).
JOBSET_VERSION = "v0.12.0"
# Helm, for `helm lint` / `helm template` of the chart in deploy/helm (not a cluster component,
# but built and cached the same way so make test needs no download but Go modules). Helm 4 reads
# the Kubernetes version it assumes from its client-go's build info: no ldflags needed for it.
HELM_VERSION = "v4.3.2"
# Kubernetes 1.36, Kueue v0.19, KWOK v0.8 and Helm v4.3 all say `go 1.26.0`; GOTOOLCHAIN=local
# cannot switch toolchains, so the local Go must satisfy it.
MIN_GO = (1, 26)

# Kueue's main.go reads the metrics serving cert from a hard-coded /etc/kueue/metrics/certs when
# its internal cert management is off (and exits if absent, even with metrics disabled); no flag
# or config field moves it. This edit (to a copy of the main package in the wrapper module; the
# module itself stays as published) makes the directory settable through the environment.
KUEUE_METRICS_CERT_EDIT = (
    'metricsCertPath := "/etc/kueue/metrics/certs"',
    'metricsCertPath := os.Getenv("KUEUE_METRICS_CERT_DIR") // gpu-portal localcluster\n'
    '\t\tif metricsCertPath == "" {\n'
    '\t\t\tmetricsCertPath = "/etc/kueue/metrics/certs"\n'
    "\t\t}",
)

# Staging modules of Kubernetes 1.36 (33 of them; cri-streaming and streaming are new since 1.33):
# k8s.io/kubernetes' go.mod replaces each with ./staging/..., which only works inside its own
# repository, so our wrapper module pins them to v0.36.x.
K8S_STAGING = """api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
cloud-provider cluster-bootstrap code-generator component-base component-helpers
controller-manager cri-api cri-client cri-streaming csi-translation-lib dynamic-resource-allocation
endpointslice
externaljwt kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet
metrics mount-utils pod-security-admission sample-apiserver sample-cli-plugin
sample-controller streaming""".split()


class BuildError(RuntimeError):
    """The binaries could not be built; the message says why and what to look at."""


@dataclass
class Component:
    tag: str  # cache directory name, e.g. kubernetes-v1.36.3
    module: str  # the module whose version we pin
    version: str
    packages: dict[str, str]  # binary name -> Go package path
    replaces: dict[str, str] = field(default_factory=dict)
    ldflags: str = "-s -w"
    tags: str = ""
    go_version: str = "1.26.0"  # the wrapper's `go` line: at least what the module's go.mod says
    # Module files copied next to the binaries: glob relative to the module dir -> folder in the
    # bin dir (the built component must run without Go or the module cache).
    assets: dict[str, str] = field(default_factory=dict)
    # Edits to a binary's main package, built from a copy in the wrapper module: file relative
    # to the module dir -> (exact text, replacement); the text must occur exactly once, so a new
    # version fails loudly instead of building unedited.
    source_edits: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Edits to any package of the module: the module is copied beside the wrapper, edited there
    # and used through a `replace` (file relative to the module dir -> [(exact text, new, how
    # many times the text occurs)]).
    module_edits: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)
    cgo: bool = False  # runc: its nsexec is C, and seccomp comes from libseccomp

    def go_mod(self) -> str:
        lines = [f"module gpu-portal.local/{self.tag}-build", "", f"go {self.go_version}", ""]
        lines.append(f"require {self.module} {self.version}")
        if self.replaces:
            lines += ["", "replace ("]
            lines += [f"\t{old} => {new}" for old, new in sorted(self.replaces.items())]
            lines.append(")")
        return "\n".join(lines) + "\n"


def k8s_ldflags() -> str:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    # Without these /version says v0.0.0 and clients (kubectl, the Python client) misjudge it.
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={KUBERNETES_VERSION}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.gitCommit=",
        ]
    return " ".join(flags)


def _helm_ldflags() -> str:
    # As helm's Makefile: the version `helm version` reports.
    return f"-s -w -X helm.sh/helm/v4/internal/version.version={HELM_VERSION}"


def kueue_component(version: str, go_version: str = "1.26.0") -> Component:
    """Kueue at `version`, its CRDs and webhook manifest copied beside it (previous_release.py
    builds the previous release's the same way)."""
    return Component(
        tag=f"kueue-{version}",
        module="sigs.k8s.io/kueue",
        version=version,
        packages={"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
        ldflags=f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={version}",
        go_version=go_version,
        assets={
            "config/components/crd/bases/*.yaml": "crds",
            # The kustomization says which CRDs get a conversion webhook (the patches).
            "config/components/crd/kustomization.yaml": "crds",
            "config/components/crd/patches/webhook_in_*.yaml": "crds/patches",
            "config/components/webhook/manifests.yaml": "webhook",
        },
        source_edits={"cmd/kueue/main.go": KUEUE_METRICS_CERT_EDIT},
    )


def jobset_component(version: str = JOBSET_VERSION) -> Component:
    """The JobSet controller (its main package is the module root, as its Makefile builds
    main.go), its CRD and webhook manifest (with the kustomize patches that scope the pod
    webhooks to JobSet's pods) copied beside it. No source edit: every path it reads (webhook
    and metrics certs) is settable in its Configuration."""
    return Component(
        tag=f"jobset-{version}",
        module="sigs.k8s.io/jobset",
        version=version,
        packages={"jobset": "sigs.k8s.io/jobset"},
        ldflags=f"-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion={version}",
        assets={
            "config/components/crd/bases/*.yaml": "crds",
            "config/components/webhook/manifests.yaml": "webhook",
            "config/components/webhook/kustomization.yaml": "webhook",
            "config/components/webhook/patches/*.yaml": "webhook/patches",
        },
    )


def components() -> list[Component]:
    staging_version = "v0." + KUBERNETES_VERSION.split(".", 1)[1]
    k8s_cmds = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]
    return [
        Component(
            tag=f"etcd-{ETCD_VERSION}",
            module="go.etcd.io/etcd/server/v3",
            version=ETCD_VERSION,
            packages={"etcd": "go.etcd.io/etcd/server/v3"},
        ),
        Component(
            tag=f"kwok-{KWOK_VERSION}",
            module="sigs.k8s.io/kwok",
            version=KWOK_VERSION,
            packages={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
        ),
        Component(
            tag=f"kubernetes-{KUBERNETES_VERSION}",
            module="k8s.io/kubernetes",
            version=KUBERNETES_VERSION,
            packages={name: f"k8s.io/kubernetes/cmd/{name}" for name in k8s_cmds},
            replaces={f"k8s.io/{m}": f"k8s.io/{m} {staging_version}" for m in K8S_STAGING},
            ldflags=k8s_ldflags(),
            tags="grpcnotrace",
        ),
        kueue_component(KUEUE_VERSION),
        jobset_component(),
        Component(
            tag=f"helm-{HELM_VERSION}",
            module="helm.sh/helm/v4",
            version=HELM_VERSION,
            packages={"helm": "helm.sh/helm/v4/cmd/helm"},
            ldflags=_helm_ldflags(),
        ),
    ]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-portal"


def bin_dir(comp: Component) -> Path:
    return cache_root() / "bin" / comp.tag


def binaries() -> dict[str, Path]:
    """Paths of all binaries by name (whether or not they are built yet)."""
    return {name: bin_dir(c) / name for c in components() for name in c.packages}


def is_built(comp: Component) -> bool:
    d = bin_dir(comp)
    return (
        (d / ".complete").is_file()
        and all((d / n).is_file() for n in comp.packages)
        and all((d / dest).is_dir() for dest in comp.assets.values())
    )


def all_built() -> bool:
    return all(is_built(c) for c in components())


def _log(msg: str) -> None:
    print(f"[localcluster build] {msg}", file=sys.stderr, flush=True)


def _go_env(cgo: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    env.update(GOTOOLCHAIN="local", CGO_ENABLED="1" if cgo else "0")
    # The wrapper modules live outside any VCS checkout; -mod=mod lets `go build` refresh go.sum.
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -buildvcs=false -mod=mod").strip()
    env.setdefault("GOPATH", str(Path.home() / "go"))  # default GOMODCACHE ~/go/pkg/mod persists
    return env


def _check_go() -> str:
    go = shutil.which("go")
    need = ".".join(map(str, MIN_GO))
    if not go:
        raise BuildError(
            f"the Go toolchain ('go') is not on PATH; Go >= {need} is needed to build "
            "kube-apiserver, etcd, kwok and Kueue"
        )
    out = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, env=_go_env(), check=False
    ).stdout.strip()
    try:
        major, minor = (int(x) for x in out.removeprefix("go").split(".")[:2])
    except ValueError as exc:
        raise BuildError(f"cannot read the Go version from 'go env GOVERSION': {out!r}") from exc
    if (major, minor) < MIN_GO:
        raise BuildError(
            f"{out} is too old: Kubernetes {KUBERNETES_VERSION} and Kueue {KUEUE_VERSION} "
            f"need Go >= {need}"
        )
    return go


def _count_packages(go: str, comp: Component, src: Path) -> int:
    """How many packages the build needs at most (an upper bound: cached ones are not rebuilt)."""
    cmd = [
        go,
        "list",
        "-deps",
        *(["-tags", comp.tags] if comp.tags else []),
        *comp.packages.values(),
    ]
    res = subprocess.run(
        cmd,
        cwd=src,
        env=_go_env(),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return len(res.stdout.split()) if res.returncode == 0 else 0


def _run_logged(
    cmd: list[str],
    cwd: Path,
    log,
    what: str,
    total: int = 0,
    count_progress: bool = False,
    cgo: bool = False,
) -> None:
    """Run cmd, copy its output to log; with count_progress, report compiled packages (-v)."""
    log.write(f"\n$ {' '.join(cmd)}\n")
    log.flush()
    start = time.monotonic()
    last_report = start
    compiled = 0
    tail: list[str] = []
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=_go_env(cgo),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    # A reader thread, so that progress is printed every 30 s even while the linker, which
    # prints nothing for minutes, runs.
    lines: queue.Queue[str | None] = queue.Queue()

    def read(stream) -> None:
        for text in stream:
            lines.put(text)
        lines.put(None)

    threading.Thread(target=read, args=(proc.stdout,), daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=5)
        except queue.Empty:
            line = ""
        if line is None:
            break
        if line:
            log.write(line)
            tail = (tail + [line.rstrip()])[-25:]
            if count_progress and not line.startswith(("#", " ", "go: ")):
                compiled += 1
        now = time.monotonic()
        if now - last_report >= 30:
            last_report = now
            of = f" of at most {total}" if total else ""
            done = f", {compiled} packages compiled{of}" if count_progress else ""
            _log(f"  {what}: still working ({int(now - start)} s{done})")
    rc = proc.wait()
    log.flush()
    if rc != 0:
        raise BuildError(
            f"{what} failed (exit {rc}); last output:\n  "
            + "\n  ".join(tail)
            + f"\nfull log: {log.name}"
        )


def _module_dir(go: str, comp: Component, src: Path) -> Path:
    """Where the wrapper module's copy of comp.module lies (in the module cache, read-only)."""
    res = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", comp.module],
        cwd=src,
        env=_go_env(),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    path = Path(res.stdout.strip())
    if res.returncode != 0 or not res.stdout.strip() or not path.is_dir():
        raise BuildError(f"cannot find the module dir of {comp.module}: {res.stderr.strip()}")
    return path


def _edit_packages(comp: Component, module_dir: Path, src: Path) -> dict[str, str]:
    """Copy each main package with a source edit into the wrapper module, apply the edits and
    return {package path: local package to build instead}. (`go build -overlay` would be simpler
    but refuses to replace files in the module cache.)"""
    local: dict[str, str] = {}
    for rel, (old, new) in comp.source_edits.items():
        pkg_dir = Path(rel).parent
        pkg = f"{comp.module}/{pkg_dir}"
        if pkg not in comp.packages.values():
            raise BuildError(f"{rel}: only files of the binaries' main packages can be edited")
        if pkg not in local:
            shutil.rmtree(src / pkg_dir, ignore_errors=True)
            (src / pkg_dir).mkdir(parents=True)
            for go_file in (module_dir / pkg_dir).glob("*.go"):
                if not go_file.name.endswith("_test.go"):
                    (src / pkg_dir / go_file.name).write_text(go_file.read_text())
            local[pkg] = f"./{pkg_dir}"
        target = src / rel
        text = target.read_text()
        if text.count(old) != 1:
            raise BuildError(
                f"{comp.module}@{comp.version} {rel}: expected exactly one {old!r} to edit, "
                f"found {text.count(old)}; the edit in localcluster/build.py needs updating"
            )
        target.write_text(text.replace(old, new))
    return local


def _edit_module(go: str, comp: Component, src: Path) -> None:
    """Copy comp.module out of the module cache into src/edited-module, apply comp.module_edits
    and point the wrapper's go.mod at the copy."""
    (src / "go.mod").write_text(comp.go_mod())
    pristine = _module_dir(go, comp, src)
    copy = src / "edited-module"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(pristine, copy, copy_function=shutil.copyfile)
    for rel, edits in comp.module_edits.items():
        target = copy / rel
        text = target.read_text()
        for old, new, times in edits:
            if text.count(old) != times:
                raise BuildError(
                    f"{comp.module}@{comp.version} {rel}: expected {old!r} {times} time(s) to "
                    f"edit, found {text.count(old)}; the edit in localcluster needs updating"
                )
            text = text.replace(old, new)
        target.write_text(text)
    (src / "go.mod").write_text(comp.go_mod() + f"\nreplace {comp.module} => ./edited-module\n")


def _copy_assets(comp: Component, module_dir: Path, dest_root: Path) -> None:
    for pattern, dest in comp.assets.items():
        matches = sorted(glob.glob(str(module_dir / pattern)))
        if not matches:
            raise BuildError(f"{comp.module}@{comp.version} has no {pattern} to copy")
        (dest_root / dest).mkdir(parents=True, exist_ok=True)
        for path in matches:
            target = dest_root / dest / Path(path).name
            shutil.copyfile(path, target)  # copyfile: the module cache's files are read-only
            target.chmod(0o644)


def _build_component(go: str, comp: Component) -> None:
    src = cache_root() / "src" / comp.tag
    src.mkdir(parents=True, exist_ok=True)
    partial = cache_root() / "bin" / f".partial-{comp.tag}"
    partial.mkdir(parents=True, exist_ok=True)
    log_path = cache_root() / "logs" / f"build-{comp.tag}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    _log(f"building {comp.tag} ({', '.join(comp.packages)}); log: {log_path}")
    with open(log_path, "a", encoding="utf-8") as log:
        gomod = comp.go_mod()
        tools = [f"{pkg}@{comp.version}" for pkg in comp.packages.values()]
        spec = gomod + "\n".join(tools) + "\n"
        marker = src / ".wrapper-spec"
        if not marker.is_file() or marker.read_text() != spec or not (src / "go.sum").is_file():
            # Fresh wrapper module; `go get -tool` resolves and records every dependency.
            (src / "go.mod").write_text(gomod)
            (src / "go.sum").unlink(missing_ok=True)
            _log("  resolving modules (downloads through the Go module proxy on first run)")
            _run_logged([go, "get", "-tool", *tools], src, log, "go get (module download)")
            marker.write_text(spec)
        cmd = [go, "build", "-v", "-trimpath", "-ldflags", comp.ldflags, "-o", str(partial) + "/"]
        if comp.tags:
            cmd[3:3] = ["-tags", comp.tags]
        if comp.module_edits:
            _edit_module(go, comp, src)
        module_dir = _module_dir(go, comp, src) if comp.assets or comp.source_edits else None
        local = _edit_packages(comp, module_dir, src) if module_dir and comp.source_edits else {}
        total = _count_packages(go, comp, src)
        _log(f"  compiling up to {total} packages, then linking")
        _run_logged(
            cmd + [local.get(pkg, pkg) for pkg in comp.packages.values()],
            src,
            log,
            f"go build {comp.tag}",
            total=total,
            count_progress=True,
            cgo=comp.cgo,
        )
    for name, pkg in comp.packages.items():
        # go build names a binary after its package path, minus a /vN suffix (etcd: "server").
        parts = pkg.split("/")
        default = parts[-2] if re.fullmatch(r"v\d+", parts[-1]) else parts[-1]
        if default != name and (partial / default).is_file():
            (partial / default).replace(partial / name)
        if not (partial / name).is_file():
            raise BuildError(f"go build finished but {partial / name} is missing")
    if module_dir:
        _copy_assets(comp, module_dir, partial)
    edited = "".join(f" (edited: {f})" for f in comp.source_edits)
    (partial / ".complete").write_text(f"{comp.module} {comp.version}{edited}\n")
    final = bin_dir(comp)
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)
    _log(f"  {comp.tag} done in {int(time.monotonic() - start)} s")


def ensure_built(verbose: bool = True) -> dict[str, Path]:
    """Build whatever is missing (under a lock, so parallel callers wait) and return the paths."""
    build_missing(components(), verbose=verbose)
    _verify_versions()
    return binaries()


def build_missing(comps: list[Component], *, verbose: bool = True) -> None:
    """Build those of `comps` not built yet, under the build lock."""
    if all(is_built(c) for c in comps):
        return
    go = _check_go()
    lock_path = cache_root() / "bin" / ".build.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log("another build is running; waiting for it to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        start = time.monotonic()
        todo = [c for c in comps if not is_built(c)]
        if todo and verbose:
            _log(
                f"cold build of {', '.join(c.tag for c in todo)} with {go} "
                f"on {os.cpu_count()} CPUs: about 13 minutes for the whole stack on 2 fast "
                "cores, up to 40 on slow ones; only the first time"
            )
        for comp in todo:
            _build_component(go, comp)
        if todo:
            _log(f"built in {int(time.monotonic() - start)} s")


def _verify_versions() -> None:
    """Fail loudly if a cached binary does not report the version we pinned."""
    paths = binaries()
    checks = {
        "kube-apiserver": KUBERNETES_VERSION,
        "kubectl": KUBERNETES_VERSION,
        "etcd": ETCD_VERSION.lstrip("v"),
        "kwok": KWOK_VERSION.lstrip("v"),
        "helm": HELM_VERSION,
    }
    version_args = {"kubectl": ["version", "--client"], "helm": ["version", "--short"]}
    for name, want in checks.items():
        args = [str(paths[name]), *version_args.get(name, ["--version"])]
        out = subprocess.run(
            args, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
        )
        if want not in out.stdout + out.stderr:
            raise BuildError(
                f"{paths[name]} does not report version {want}: "
                f"{(out.stdout + out.stderr).strip()[:300]}; delete "
                f"{paths[name].parent} to rebuild it"
            )
