"""The inference stand-in: an HTTP server on PORT (default 8080) that answers POST /v1/predict
with a small numpy computation, GET /healthz with ok, and counts requests at GET /metrics in
Prometheus' text format (requests_total), so an autoscaler can follow real load."""

import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

PORT = int(os.environ.get("PORT", "8080"))
weights = np.random.default_rng(0).normal(size=(16, 4))
lock = threading.Lock()
served = 0


class Handler(BaseHTTPRequestHandler):
    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
        elif self.path == "/metrics":
            self._send(200, f"requests_total {served}\n".encode(), "text/plain; version=0.0.4")
        else:
            self._send(404, b'{"error": "POST /v1/predict"}\n')

    def do_POST(self) -> None:  # noqa: N802
        global served
        size = int(self.headers.get("Content-Length") or 0)
        try:
            inputs = np.asarray(json.loads(self.rfile.read(size) or b"[]"), dtype=float)
            out = (inputs.reshape(-1, 16) @ weights).tolist() if inputs.size else []
        except (ValueError, TypeError):
            self._send(400, b'{"error": "send a JSON list of 16 numbers per row"}\n')
            return
        with lock:
            served += 1
        self._send(200, json.dumps({"outputs": out, "host": os.uname().nodename}).encode())

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per request would drown the pod's log


# As a container's first process it gets no default handling of SIGTERM: stop when asked, or
# every scale-down and rollout waits out the whole grace period.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()  # noqa: S104 (a pod)
