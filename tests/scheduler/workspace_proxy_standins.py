"""Stand-ins for the workspace proxy's process tests: a workspace server (HTTP and WebSocket)
that refuses every request without its secret and logs what it receives, and a portal that
answers the proxy's two questions. Both on free localhost ports, in threads of the test."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = "S3CRET-of-the-server"
PROXY_TOKEN = "proxy-token"  # noqa: S105 - the tests' own
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler):
        super().__init__(("127.0.0.1", 0), handler)
        self.seen: list[dict] = []
        self.state: dict = {}
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server_address[1]


class Upstream(BaseHTTPRequestHandler):
    """A workspace server: checks its own secret as Jupyter checks its token."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _record(self, body: bytes = b"") -> bool:
        self.server.seen.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": list(self.headers.items()),
                "cookie": self.headers.get("Cookie", ""),
                "body": body,
            }
        )
        secret = self.server.state.get("secret", SECRET)
        cookie = f"code-server-session={secret}"  # code-server's way: its hashed password
        as_code_server = cookie in [c.strip() for c in self.headers.get("Cookie", "").split(";")]
        if self.headers.get("Authorization") != f"token {secret}" and not as_code_server:
            self._answer(401, b"no token: this server is not yours")
            return False
        return True

    def _answer(self, status: int, body: bytes, headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", ""):
            data = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return data
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self):
        if not self._record():
            return
        if self.headers.get("Upgrade", "").lower() == "websocket":
            self._websocket()
            return
        self._answer(
            200,
            b"hello from the server",
            [("Set-Cookie", "_xsrf=abc; Path=/"), ("Set-Cookie", "__Host-gpu-portal-ws=evil")],
        )

    def do_POST(self):
        body = self._body()
        if self._record(body):
            self._answer(200, b"got " + body)

    def _websocket(self):
        key = self.headers["Sec-WebSocket-Key"]
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()  # noqa: S324
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        payload = read_frame(self.rfile.read)
        self.wfile.write(frame(b"echo: " + payload, mask=False))
        self.wfile.flush()
        self.close_connection = True


class PortalStandIn(BaseHTTPRequestHandler):
    """The portal's /workspaces/proxy/ answers: ticket `good` for workspace 7 gives session
    `sess-7`; sessions in state["valid"] are let through to the upstream in state (`sess-code`
    as to a code-server: its session cookie, its path cut)."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append({"path": self.path, "body": body})
        state = self.server.state
        if self.headers.get("X-Proxy-Token") != PROXY_TOKEN:
            return self._json(403, {"detail": "not the proxy"})
        if self.path == "/workspaces/proxy/enter/":
            if body == {"workspace": 7, "ticket": "good"}:
                return self._json(200, {"session": "sess-7", "max_age": 600, "user": "member"})
            return self._json(403, {"detail": "the ticket was used already"})
        valid = body.get("workspace") == 7 and body.get("session") in state["valid"]
        if valid and body["session"] == "sess-code":
            return self._json(
                200,
                {
                    "user": "member",
                    "upstream": f"127.0.0.1:{state['upstream']}",
                    "strip_prefix": "/ws/tenant-team-a/cs",
                    "headers": {},
                    "cookies": {"code-server-session": SECRET},
                },
            )
        if valid:
            return self._json(
                200,
                {
                    "user": "member",
                    "upstream": f"127.0.0.1:{state['upstream']}",
                    "headers": {"Authorization": f"token {SECRET}"},
                    "cookies": {},
                },
            )
        return self._json(403, {"detail": "not shared with you"})

    def _json(self, status, data):
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def frame(payload: bytes, *, mask: bool) -> bytes:
    """One final text frame (RFC 6455), masked as a client sends it."""
    head = bytes([0x81])
    length = len(payload)
    size = bytes([length | (0x80 if mask else 0)]) if length < 126 else b""
    if length >= 126:
        size = bytes([126 | (0x80 if mask else 0)]) + struct.pack("!H", length)
    if not mask:
        return head + size + payload
    key = b"\x01\x02\x03\x04"
    return head + size + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def read_frame(read) -> bytes:
    first, second = read(2)
    assert first & 0x0F == 0x1, "a text frame"
    length = second & 0x7F
    if length == 126:
        length = struct.unpack("!H", read(2))[0]
    key = read(4) if second & 0x80 else None
    data = read(length)
    return bytes(b ^ key[i % 4] for i, b in enumerate(data)) if key else data


def exchange(port: int, raw: bytes, timeout: float = 10.0) -> tuple[int, list, bytes]:
    """Send one raw request, read the answer to its end: (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = [tuple(line.split(": ", 1)) for line in lines[1:]]
    return int(lines[0].split(" ")[1]), headers, body


def request(method: str, host: str, path: str, headers=(), body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers)]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
