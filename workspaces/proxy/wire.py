"""HTTP/1.1 on the wire for the proxy: heads, cookies and bodies (pure functions over bytes and
strings), plus the few stream readers it needs. Each connection carries one request: the proxy
answers with `Connection: close`, so a second request never travels a checked connection
unchecked."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "upgrade",
    }
)


class BadRequest(ValueError):
    """A request the proxy cannot read; the message says what is wrong (a 400)."""


@dataclass
class Head:
    first: tuple[str, str, str]  # method, target, version (or version, status, reason)
    headers: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)

    def all(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]

    def without(self, *names: str) -> list[tuple[str, str]]:
        drop = {n.lower() for n in names}
        return [(k, v) for k, v in self.headers if k.lower() not in drop]


def parse_head(raw: bytes) -> Head:
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError:  # latin-1 decodes any byte; kept for clarity
        raise BadRequest("the request head is not text") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) != 3:
        raise BadRequest("the first line must be METHOD TARGET HTTP/1.1")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or any(c in name for c in " \t"):
            raise BadRequest(f"a malformed header line: {line[:40]!r}")
        headers.append((name, value.strip()))
    return Head((parts[0], parts[1], parts[2]), headers)


def render_head(first: str, headers: list[tuple[str, str]]) -> bytes:
    for name, value in headers:
        if any(c in name + value for c in "\r\n"):
            raise BadRequest("a header holds a line break")
    lines = [first, *(f"{k}: {v}" for k, v in headers), "", ""]
    return "\r\n".join(lines).encode("latin-1")


def cookies(header_values: list[str]) -> list[tuple[str, str]]:
    """The (name, value) pairs of the request's Cookie headers, in order."""
    pairs = []
    for header in header_values:
        for part in header.split(";"):
            name, sep, value = part.strip().partition("=")
            if sep and name:
                pairs.append((name, value))
    return pairs


def cookie_header(pairs: list[tuple[str, str]]) -> str:
    return "; ".join(f"{name}={value}" for name, value in pairs)


def is_websocket(head: Head) -> bool:
    connection = {t.strip().lower() for t in (head.get("Connection") or "").split(",")}
    return "upgrade" in connection and (head.get("Upgrade") or "").lower() == "websocket"


def is_chunked(head: Head) -> bool:
    codings = ",".join(head.all("Transfer-Encoding")).lower()
    if codings and codings.replace(" ", "") != "chunked":
        raise BadRequest("Transfer-Encoding: only chunked is passed on")
    return bool(codings)


def content_length(head: Head) -> int | None:
    values = {v.strip() for v in head.all("Content-Length")}
    if not values:
        return None
    if len(values) != 1 or not next(iter(values)).isdigit():
        raise BadRequest("Content-Length: one whole number of bytes")
    return int(values.pop())


def same_origin(head: Head) -> bool:
    """No Origin (not a browser's cross-site request) or one naming the request's own host."""
    origin = head.get("Origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == (head.get("Host") or "").lower()


def cut_prefix(target: str, prefix: str) -> str:
    """The request target without the workspace's path (code-server serves from /)."""
    if not prefix or not (target == prefix or target.startswith((prefix + "/", prefix + "?"))):
        return target
    rest = target[len(prefix) :]
    return rest if rest.startswith("/") else "/" + rest


def safe_next(value: str | None) -> str:
    """A path on this host to go to after the ticket (never another host)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    if any(ord(c) < 0x21 for c in value):
        return "/"
    return value


async def read_head(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise BadRequest(f"the request head is over {MAX_HEAD} bytes") from None


async def copy_exact(reader, writer, n: int) -> None:
    while n > 0:
        chunk = await reader.read(min(n, 65536))
        if not chunk:
            raise BadRequest("the body ended before its Content-Length")
        writer.write(chunk)
        await writer.drain()
        n -= len(chunk)


async def copy_chunked(reader, writer) -> None:
    """A chunked body, passed on as it came, to its last chunk and trailers."""
    while True:
        line = await reader.readuntil(b"\r\n")
        writer.write(line)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadRequest("a malformed chunk size") from None
        if size == 0:
            while True:  # trailers, then the empty line
                trailer = await reader.readuntil(b"\r\n")
                writer.write(trailer)
                if trailer == b"\r\n":
                    await writer.drain()
                    return
        await copy_exact(reader, writer, size + 2)


async def pipe(reader, writer) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        try:
            writer.close()
        except (ConnectionError, RuntimeError):
            pass
