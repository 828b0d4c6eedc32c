"""Stand-ins for the fleet's tests: kubeconfigs (a good one, with embedded certificate data and a
token), Kueue's CRDs as the probes read them, and an API server on loopback."""

from __future__ import annotations

import base64
import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot a real one\n").decode()


def kubeconfig(server: str = "https://10.0.0.7:6443", **changes) -> dict:
    """A worker's kubeconfig as a dict; `changes` maps "clusters"/"users" to fields merged into
    the one entry (a value None removes the field)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "east", "cluster": {"server": server, "certificate-authority-data": CA}}
        ],
        "users": [{"name": "multikueue", "user": {"token": "secret-token-value"}}],
        "contexts": [{"name": "east", "context": {"cluster": "east", "user": "multikueue"}}],
        "current-context": "east",
    }
    config = copy.deepcopy(config)
    for section, fields in changes.items():
        body = config[section][0]["cluster" if section == "clusters" else "user"]
        for key, value in fields.items():
            if value is None:
                body.pop(key, None)
            else:
                body[key] = value
    return config


def text(config: dict | None = None) -> str:
    return yaml.safe_dump(config if config is not None else kubeconfig())


def secret(config_text: str) -> dict:
    """A Secret as the API server returns it."""
    return {
        "kind": "Secret",
        "metadata": {"name": "east-kubeconfig", "namespace": "kueue-system"},
        "data": {"kubeconfig": base64.b64encode(config_text.encode()).decode()},
    }


def crd(name: str, *, spec_properties: dict) -> dict:
    """A Kueue CRD serving v1beta2, cut to the spec properties the probes read."""
    spec = {"type": "object", "properties": spec_properties}
    return {
        "metadata": {"name": name},
        "spec": {
            "versions": [
                {
                    "name": "v1beta2",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"properties": {"spec": spec}}},
                }
            ]
        },
    }


# v0.18 and later: ClusterQueue's spec.concurrentAdmissionPolicy; v0.19 and later: the uniqueness
# rule on MultiKueueConfig's spec.clusters (as in Kueue's published CRDs).
CLUSTERQUEUE_CRD = crd(
    "clusterqueues.kueue.x-k8s.io",
    spec_properties={"cohortName": {}, "concurrentAdmissionPolicy": {}},
)
MULTIKUEUE_018 = crd(
    "multikueueconfigs.kueue.x-k8s.io",
    spec_properties={"clusters": {"type": "array", "maxItems": 20}},
)
MULTIKUEUE_019 = crd(
    "multikueueconfigs.kueue.x-k8s.io",
    spec_properties={
        "clusters": {
            "type": "array",
            "maxItems": 20,
            "x-kubernetes-validations": [{"message": "must be unique", "rule": "..."}],
        }
    },
)


class StandInApiServer:
    """An API server on loopback that answers `/version` and Kueue's CRDs as told: `status`
    set to 401 or 403 refuses every call; `paths` records what was asked."""

    def __init__(self, version: str = "v1.36.3", crds: tuple[dict, ...] = ()):
        self.version, self.status, self.paths = version, 200, []
        self.crds = {c["metadata"]["name"]: c for c in crds}
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                stand_in.paths.append(self.path)
                status, body = stand_in.answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def answer(self, path: str) -> tuple[int, dict]:
        if self.status != 200:
            reason = {401: "Unauthorized", 403: "Forbidden"}.get(self.status, "Error")
            return self.status, {"kind": "Status", "code": self.status, "message": reason}
        if path == "/version":
            return 200, {"gitVersion": self.version}
        name = path.rsplit("/", 1)[-1]
        if name in self.crds:
            return 200, self.crds[name]
        return 404, {"kind": "Status", "code": 404, "message": "not found"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
