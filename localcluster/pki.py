"""The local cluster's certificates and credentials: a CA, the API server's serving
certificate, the service-account key pair, one static admin token, and the admin kubeconfig
that names them. Made once, under <repo>/.local/cluster/pki."""

from __future__ import annotations

import base64
import os
import secrets
import shutil

import yaml

from .base import KUBECONFIG, PKI, ClusterError, openssl, server_url

SANS = (
    # 10.245.0.1: the real node's bridge, where its pods reach the API server (realnode.py).
    "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,IP:10.245.0.1,DNS:localhost,DNS:kubernetes,"
    "DNS:kubernetes.default,DNS:kubernetes.default.svc,"
    "DNS:kubernetes.default.svc.cluster.local\n"
    "extendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
)


def ensure_pki() -> None:
    """CA, service-account key pair and an admin token (once); the API server's serving cert
    (again when its names change)."""
    if not (PKI / "tokens.csv").is_file():
        _make_ca_and_keys()
    ext = PKI / "apiserver.ext"
    if not ext.is_file() or ext.read_text() != SANS:
        ext.write_text(SANS)
        _make_apiserver_cert()


def _make_ca_and_keys() -> None:
    if not shutil.which("openssl"):
        raise ClusterError("openssl is needed to create the cluster's certificates")
    PKI.mkdir(parents=True, exist_ok=True)
    os.chmod(PKI, 0o700)
    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
        "-keyout", str(PKI / "ca.key"), "-out", str(PKI / "ca.crt"),
        "-subj", "/CN=gpu-portal-localcluster-ca",
    )  # fmt: skip
    openssl("genrsa", "-out", str(PKI / "sa.key"), "2048")
    openssl("rsa", "-in", str(PKI / "sa.key"), "-pubout", "-out", str(PKI / "sa.pub"))
    token = secrets.token_hex(24)
    # Static token file: one cluster-admin user (system:masters bypasses RBAC).
    (PKI / "tokens.csv").write_text(
        f'{token},localcluster-admin,localcluster-admin,"system:masters"\n'
    )


def _make_apiserver_cert() -> None:
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(PKI / "apiserver.key"),
        "-out", str(PKI / "apiserver.csr"), "-subj", "/CN=kube-apiserver",
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", str(PKI / "apiserver.csr"), "-CA", str(PKI / "ca.crt"),
        "-CAkey", str(PKI / "ca.key"), "-CAcreateserial", "-days", "3650",
        "-extfile", str(PKI / "apiserver.ext"), "-out", str(PKI / "apiserver.crt"),
    )  # fmt: skip


def admin_token() -> str:
    return (PKI / "tokens.csv").read_text().split(",", 1)[0]


def write_kubeconfig() -> None:
    ca = base64.b64encode((PKI / "ca.crt").read_bytes()).decode()
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "localcluster",
                "cluster": {"server": server_url(), "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": "localcluster-admin", "user": {"token": admin_token()}}],
        "contexts": [
            {
                "name": "localcluster",
                "context": {"cluster": "localcluster", "user": "localcluster-admin"},
            }
        ],
        "current-context": "localcluster",
    }
    KUBECONFIG.parent.mkdir(parents=True, exist_ok=True)
    tmp = KUBECONFIG.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(cfg, sort_keys=False))
    os.chmod(tmp, 0o600)
    tmp.replace(KUBECONFIG)
