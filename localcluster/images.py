"""Images for the real node, built here: no registry outside is reachable.

1. A base from Debian's packages (`debootstrap --variant=minbase`, bookworm, with Python 3.11),
   committed by buildah as `docker.io/library/python:3.11-slim-bookworm`: the name the project's
   Dockerfile starts FROM, so that file builds unchanged. It is Debian's Python 3.11 of the same
   release the upstream image is built on, with `python` on PATH as there.
2. The images built from it with buildah (Containerfiles in localcluster/images/): the portal's
   own from the project's Dockerfile, demo work (Python with numpy and Jupyter), the chart's trial
   PostgreSQL and Redis, and CoreDNS.
3. Each loaded into the node's containerd (`ctr images import`) when containerd does not hold
   that image ID yet.

Caches: the debootstrap tree and buildah's layer cache persist, so a second build of an
unchanged image takes seconds; an image is rebuilt only when its inputs change.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import build
from .base import REPO_ROOT, ClusterError, log

IMAGES_DIR = Path(__file__).resolve().parent / "images"
BASE_REF = "docker.io/library/python:3.11-slim-bookworm"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ["python3", "python3-venv", "ca-certificates"]
TAG = "local"  # never `latest`: the kubelet would try to pull it


@dataclass(frozen=True)
class Image:
    name: str  # the reference pods use, e.g. localhost/gpu-portal/demo-python:local
    containerfile: Path
    context: Path


def demo_python_ref() -> str:
    return f"localhost/gpu-portal/demo-python:{TAG}"


def portal_ref() -> str:
    return f"localhost/gpu-portal/portal:{TAG}"


def coredns_ref() -> str:
    return f"localhost/gpu-portal/coredns:{TAG}"


def node_images(coredns_dir: Path) -> list[Image]:
    """What the real node needs to run the cluster's own pods and the demo's work."""
    return [
        Image(coredns_ref(), IMAGES_DIR / "coredns.Containerfile", coredns_dir),
        Image(demo_python_ref(), IMAGES_DIR / "demo-python.Containerfile", IMAGES_DIR),
    ]


def chart_images() -> list[Image]:
    """What installing the chart as pods needs: the portal and its trial PostgreSQL and Redis."""
    return [
        Image(portal_ref(), REPO_ROOT / "Dockerfile", REPO_ROOT),
        Image(
            f"localhost/gpu-portal/postgres:{TAG}",
            IMAGES_DIR / "postgres.Containerfile",
            IMAGES_DIR,
        ),
        Image(f"localhost/gpu-portal/redis:{TAG}", IMAGES_DIR / "redis.Containerfile", IMAGES_DIR),
    ]


def _run(cmd: list[str], what: str, **kw) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)
    if res.returncode != 0:
        tail = "\n  ".join((res.stdout + res.stderr).strip().splitlines()[-20:])
        raise ClusterError(f"{what} failed (exit {res.returncode}):\n  {tail}")
    return res.stdout


def _buildah() -> str:
    exe = shutil.which("buildah")
    if not exe:
        raise ClusterError("buildah is missing: run scripts/bootstrap.sh (it installs it)")
    return exe


def image_id(ref: str) -> str | None:
    res = subprocess.run(
        [_buildah(), "inspect", "--type", "image", "--format", "{{.FromImageID}}", ref],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return res.stdout.strip() or None if res.returncode == 0 else None


def ensure_base() -> str:
    """The base image from Debian's packages; made once (about two minutes), then found."""
    found = image_id(BASE_REF)
    if found:
        return found
    root = build.cache_root() / "images" / f"rootfs-{SUITE}"
    if not (root / ".complete").is_file():
        shutil.rmtree(root, ignore_errors=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        log(f"building the base image from Debian's packages (debootstrap {SUITE}; first time)")
        start = time.monotonic()
        _run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
             SUITE, str(root), MIRROR],
            "debootstrap",
        )  # fmt: skip
        # As the upstream image: `python` is Python 3.11; apt keeps no lists or archives.
        (root / "usr/local/bin/python").symlink_to("/usr/bin/python3")
        for path in [
            *(root / "var/cache/apt/archives").glob("*.deb"),
            *(root / "var/lib/apt/lists").glob("*_*"),
        ]:
            path.unlink()
        (root / ".complete").write_text(f"debootstrap {SUITE} {' '.join(BASE_PACKAGES)}\n")
        log(f"  debootstrap done in {int(time.monotonic() - start)} s")
    buildah = _buildah()
    ctr = _run([buildah, "from", "scratch"], "buildah from scratch").strip()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tarball = Path(tmp) / "rootfs.tar"
            _run(["tar", "-C", str(root), "--exclude=./.complete", "-cf", str(tarball), "."], "tar")
            _run([buildah, "add", ctr, str(tarball), "/"], "buildah add")
        _run(
            [buildah, "config", "--env", "LANG=C.UTF-8",
             "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "--cmd", "python3", ctr],
            "buildah config",
        )  # fmt: skip
        _run([buildah, "commit", "-q", ctr, BASE_REF], "buildah commit")
    finally:
        subprocess.run([buildah, "rm", ctr], capture_output=True, check=False)
    return image_id(BASE_REF) or ""


def _inputs_digest(image: Image) -> str:
    """A digest of what the build reads, to skip `buildah bud` when nothing changed (it would
    find every layer cached anyway, but walking a large context takes a while)."""
    h = hashlib.sha256(image.containerfile.read_bytes())
    ignore = image.context / ".dockerignore"
    files = subprocess.run(
        ["git", "ls-files", "-s", "--", str(image.context)],
        cwd=image.context,
        capture_output=True,
        text=True,
        check=False,
    )
    if files.returncode == 0 and files.stdout:
        h.update(files.stdout.encode())
        dirty = subprocess.run(
            ["git", "diff", "HEAD", "--", str(image.context)],
            cwd=image.context,
            capture_output=True,
            check=False,
        )
        h.update(dirty.stdout)
    else:
        for path in sorted(image.context.rglob("*")):
            if path.is_file():
                h.update(path.name.encode() + path.read_bytes())
    if ignore.is_file():
        h.update(ignore.read_bytes())
    return h.hexdigest()[:16]


HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def _trust_mounts() -> list[str]:
    """The host's CA bundle for the build's RUN steps only (pip, npm, apt over TLS), never in an
    image: where the machine reaches its registries through a proxy with its own CA, the images'
    own trust stores would refuse it."""
    if not HOST_CA_BUNDLE.is_file():
        return []
    trust = build.cache_root() / "images" / "trust"
    trust.mkdir(parents=True, exist_ok=True)
    bundle = str(HOST_CA_BUNDLE)
    (trust / "pip.conf").write_text(f"[global]\ncert = {bundle}\n")
    (trust / "npmrc").write_text(f"cafile={bundle}\n")
    return [
        "-v", f"{bundle}:{bundle}:ro",
        "-v", f"{trust / 'pip.conf'}:/etc/pip.conf:ro",
        "-v", f"{trust / 'npmrc'}:/root/.npmrc:ro",
    ]  # fmt: skip


def build_image(image: Image, build_args: dict[str, str] | None = None) -> str:
    """Build `image` (buildah bud, layers cached) unless one built from the same inputs exists;
    returns its image ID."""
    digest = _inputs_digest(image)
    stamp = build.cache_root() / "images" / "stamps" / image.name.replace("/", "_")
    found = image_id(image.name)
    if found and stamp.is_file() and stamp.read_text() == f"{digest} {found}":
        return found
    log(f"building image {image.name} (buildah, layers cached)")
    start = time.monotonic()
    _run(
        [_buildah(), "bud", "--layers", "--pull-never", "--isolation", "chroot",
         "--network", "host", *_trust_mounts(),
         *[f"--build-arg={k}={v}" for k, v in (build_args or {}).items()],
         "-f", str(image.containerfile), "-t", image.name, str(image.context)],
        f"building {image.name}",
    )  # fmt: skip
    found = image_id(image.name) or ""
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(f"{digest} {found}")
    log(f"  {image.name} built in {int(time.monotonic() - start)} s")
    return found


def load(image: Image, ctr_argv: list[str], loaded_dir: Path) -> None:
    """Import `image` into containerd's k8s.io namespace unless that image ID is there."""
    wanted = image_id(image.name) or ""
    mark = loaded_dir / image.name.replace("/", "_")
    if mark.is_file() and mark.read_text() == wanted:
        return
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "image.tar"
        _run(
            [_buildah(), "push", "-q", image.name, f"oci-archive:{archive}:{image.name}"],
            f"exporting {image.name}",
        )
        _run(
            [*ctr_argv, "images", "import", "--no-unpack", str(archive)], f"importing {image.name}"
        )
    loaded_dir.mkdir(parents=True, exist_ok=True)
    mark.write_text(wanted)
    log(f"  {image.name} loaded into the node's containerd in {time.monotonic() - start:.1f} s")
