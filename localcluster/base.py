"""What every part of the local cluster stands on: where its state lives, its ports, its error,
the log line, openssl, a webhook server's cert, an HTTP probe and the admin's API client.

`cluster` (the processes), `kueue` and `jobset` (their CRDs, certs and webhooks) all need these;
with them here, `cluster` imports `kueue` and `jobset`, and neither imports `cluster` or the
other, so there is no loop.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

from kubernetes import config
from kubernetes.client import ApiClient

REPO_ROOT = Path(__file__).resolve().parent.parent
# LOCALCLUSTER_DIR moves a whole cluster's state (a worker's: localcluster/worker.py); read once,
# at import, because every module names these paths as constants: a second cluster is a second
# process started with it set.
LOCAL_DIR = Path(os.environ.get("LOCALCLUSTER_DIR") or REPO_ROOT / ".local")
STATE_DIR = LOCAL_DIR / "cluster"
KUBECONFIG = LOCAL_DIR / "kubeconfig"
PKI = STATE_DIR / "pki"
LOGS = STATE_DIR / "logs"
RUN = STATE_DIR / "run"
PACKAGE_DIR = Path(__file__).resolve().parent


class ClusterError(RuntimeError):
    pass


ROLE_WORKER = "worker"


def role() -> str:
    """LOCALCLUSTER_ROLE: "worker" for a MultiKueue worker (its control plane, KWOK nodes, Kueue
    and JobSet: no GPU simulator or real node; MultiKueue off); anything else, the full local
    cluster, which is also the fleet's MultiKueue manager."""
    return os.environ.get("LOCALCLUSTER_ROLE", "")


def is_worker() -> bool:
    return role() == ROLE_WORKER


def api_port() -> int:
    return int(os.environ.get("LOCALCLUSTER_PORT", "6443"))


def etcd_ports() -> tuple[int, int]:
    # Derived from the API port so two checkouts with different LOCALCLUSTER_PORT never clash.
    return api_port() + 1, api_port() + 2


def kueue_ports() -> tuple[int, int, int]:
    """Kueue's webhook, health probe and metrics ports, after etcd's (same reason)."""
    return api_port() + 3, api_port() + 4, api_port() + 5


def jobset_ports() -> tuple[int, int, int]:
    """The JobSet controller's webhook, health probe and metrics ports, after Kueue's."""
    return api_port() + 6, api_port() + 7, api_port() + 8


def server_url() -> str:
    return f"https://127.0.0.1:{api_port()}"


def log(msg: str) -> None:
    print(f"[localcluster] {msg}", file=sys.stderr, flush=True)


def openssl(*args: str) -> None:
    res = subprocess.run(
        ["openssl", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False
    )
    if res.returncode != 0:
        raise ClusterError(f"openssl {' '.join(args[:2])} failed: {res.stderr.strip()}")


def server_side_apply(api, path: str, body: dict, field_manager: str) -> None:
    """PATCH an apply patch to `path` (the typed client's patch methods cannot send one;
    call_api can); forced: the local cluster's own objects are its to set."""
    api.call_api(
        path,
        "PATCH",
        query_params=[("fieldManager", field_manager), ("force", "true")],
        header_params={
            "Content-Type": "application/apply-patch+yaml",
            "Accept": "application/json",
        },
        body=body,
        auth_settings=["BearerToken"],
        response_type=None,  # the answer (the whole object) is read but not deserialized
        _return_http_data_only=True,
    )


def ensure_serving_cert(
    cert_dir: Path,
    common_name: str,
    extra_ips: tuple[str, ...] | list[str] = (),
    usage: str = "serverAuth",
) -> None:
    """tls.crt/tls.key in cert_dir for a local webhook server: RSA, IP SAN 127.0.0.1, signed by
    the cluster CA (the caBundle of its webhook configurations); made once, again if the CA is
    newer. (`usage` clientAuth makes a client certificate the same way.)"""
    cert, ca = cert_dir / "tls.crt", PKI / "ca.crt"
    if cert.is_file() and cert.stat().st_mtime >= ca.stat().st_mtime:
        return
    cert_dir.mkdir(parents=True, exist_ok=True)
    ext = cert_dir / "tls.ext"
    ips = "".join(f",IP:{ip}" for ip in extra_ips)
    ext.write_text(
        f"subjectAltName=IP:127.0.0.1,DNS:localhost{ips}\n"
        f"extendedKeyUsage={usage}\nkeyUsage=digitalSignature,keyEncipherment\n"
    )
    key, csr, crt = cert_dir / "tls.key", cert_dir / "tls.csr", cert_dir / "tls.crt.tmp"
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", f"/CN={common_name}",
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca),
        "-CAkey", str(PKI / "ca.key"), "-CAcreateserial", "-days", "3650",
        "-extfile", str(ext), "-out", str(crt),
    )  # fmt: skip
    crt.replace(cert)  # last: its presence means the pair is complete


def http_ok(url: str, token: str | None = None, timeout: float = 2) -> bool:
    ctx = None
    if url.startswith("https"):
        ctx = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    req = urllib.request.Request(url)  # noqa: S310 (http/https URLs built by the callers)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:  # noqa: S310
            return resp.status == 200
    except (OSError, ValueError):
        return False


def api_client() -> ApiClient:
    """A client of the local API server as its admin (the kubeconfig `up` writes)."""
    return config.new_client_from_config(config_file=str(KUBECONFIG))
