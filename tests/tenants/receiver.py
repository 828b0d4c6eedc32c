"""A real local HTTP receiver for webhook tests: http.server in a thread, recording each POST
and answering each path with the statuses it is told for that path (then 200)."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


@dataclass
class Receiver:
    server: ThreadingHTTPServer
    statuses: dict[str, deque] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    delay_s: float = 0.0
    # Set to hold every answer until the test releases it (hold.set()): a barrier, not a clock.
    hold: threading.Event | None = None
    arrived: int = 0  # requests read, whether answered yet or not

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.received) < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(self.received)} of {count} requests came: {self.received}"
                )
            time.sleep(0.05)
        return self.received


def start_receiver() -> Receiver:
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            length = int(self.headers.get("Content-Length", 0))
            body = self.rfile.read(length)
            receiver.arrived += 1
            if receiver.hold is not None:
                receiver.hold.wait(timeout=60)
            if receiver.delay_s:
                time.sleep(receiver.delay_s)
            receiver.received.append(Received(self.path, dict(self.headers.items()), body))
            queued = receiver.statuses.get(self.path)
            status = queued.popleft() if queued else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver
