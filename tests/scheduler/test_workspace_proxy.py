"""Issue 51, 4: the workspace auth proxy as a real process (`python -m workspaces.proxy`) in
front of a stand-in workspace server that refuses every request without its secret and logs
what reaches it, with a stand-in portal answering the proxy's questions. Proves that the
portal's cookies never reach the server, that only the proxy adds the secret, that HTTP bodies
and WebSockets (Jupyter's kernels) pass, and that refused or unknown callers get nowhere."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scheduler.workspace_proxy_standins import (
    PROXY_TOKEN,
    SECRET,
    PortalStandIn,
    Server,
    Upstream,
    exchange,
    frame,
    read_frame,
    request,
)
from workspaces.proxy import wire
from workspaces.proxy.config import ConfigError, from_env

ROOT = Path(__file__).resolve().parents[2]
HOST = "w7.ws.example-workspaces.test"
PATH = "/ws/tenant-team-a/nb/"
PORTAL_COOKIES = "sessionid=PORTAL-SESSION; csrftoken=PORTAL-CSRF; __Host-sessionid=PORTAL-2"


@pytest.fixture(scope="module")
def rig():
    upstream, portal = Server(Upstream), Server(PortalStandIn)
    portal.state.update(valid={"sess-7", "sess-code"}, upstream=upstream.port)
    env = {
        **os.environ,
        "PORTAL_BASE_URL": "https://portal.example.test",
        "WORKSPACE_PROXY_PORTAL_URL": f"http://127.0.0.1:{portal.port}",
        "WORKSPACE_DOMAIN": "ws.example-workspaces.test",
        "WORKSPACE_PROXY_TOKEN": PROXY_TOKEN,
        "WORKSPACE_PROXY_HOST": "127.0.0.1",
        "WORKSPACE_PROXY_PORT": "0",  # a free port, said on its first line
        "WORKSPACE_PROXY_RECHECK_S": "0",  # every request asks: a withdrawal shows at once
    }
    process = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "workspaces.proxy"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert "listening on" in line, process.stderr.read()
        port = int(line.rsplit(":", 1)[1])
        yield {"port": port, "upstream": upstream, "portal": portal}
    finally:
        process.terminate()
        process.wait(timeout=10)
        upstream.shutdown()
        portal.shutdown()


def through(rig, method="GET", path=PATH, headers=(), body=b"", host=HOST):
    rig["upstream"].seen.clear()
    return exchange(rig["port"], request(method, host, path, headers, body))


def header(headers, name):
    return [v for k, v in headers if k.lower() == name.lower()]


def test_the_ticket_becomes_a_host_only_secure_workspace_cookie(rig):
    status, headers, _ = through(rig, path=f"/_portal/enter?ticket=good&next={PATH}")
    assert status == 303 and header(headers, "Location") == [PATH]
    assert header(headers, "Set-Cookie") == [
        "__Host-gpu-portal-ws=sess-7; Path=/; Max-Age=600; Secure; HttpOnly; SameSite=Lax"
    ]
    assert not rig["upstream"].seen  # the server saw nothing of the ticket
    # a spent or forged ticket opens nothing and says what to do; the next stays on this host
    status, headers, body = through(rig, path="/_portal/enter?ticket=bad&next=//evil.test/")
    assert status == 403 and b"open the workspace from the portal again" in body
    assert b"https://portal.example.test/workspaces/7/open/" in body
    status, headers, _ = through(rig, path="/_portal/enter?ticket=good&next=//evil.test/")
    assert status == 303 and header(headers, "Location") == ["/"]


def test_the_server_gets_its_secret_and_never_a_portal_cookie(rig):
    cookie = f"{PORTAL_COOKIES}; __Host-gpu-portal-ws=sess-7; _xsrf=abc"
    status, headers, body = through(
        rig, headers=[("Cookie", cookie), ("Authorization", "token guessed")]
    )
    assert status == 200 and body == b"hello from the server"
    (seen,) = rig["upstream"].seen
    assert ("Authorization", f"token {SECRET}") in seen["headers"]
    assert [v for k, v in seen["headers"] if k == "Authorization"] == [f"token {SECRET}"]
    assert seen["cookie"] == "_xsrf=abc"  # its own cookie only
    assert "PORTAL" not in str(seen["headers"]) and "sess-7" not in str(seen["headers"])
    # the server may set its own cookies, never the proxy's
    assert header(headers, "Set-Cookie") == ["_xsrf=abc; Path=/"]
    assert header(headers, "Connection") == ["close"]


def test_without_the_secret_the_server_refuses(rig):
    """The stand-in is a server that checks its secret: straight to it, the request fails."""
    direct = request("GET", HOST, PATH, [("Cookie", PORTAL_COOKIES), ("Connection", "close")])
    status, _, body = exchange(rig["upstream"].port, direct)
    assert status == 401 and b"no token" in body


def test_no_workspace_cookie_is_sent_to_the_portal_and_never_reaches_the_server(rig):
    status, headers, _ = through(rig, headers=[("Cookie", PORTAL_COOKIES)])
    assert status == 303
    assert header(headers, "Location") == ["https://portal.example.test/workspaces/7/open/"]
    status, _, _ = through(rig, "POST", headers=[("Cookie", PORTAL_COOKIES)], body=b"x")
    assert status == 401
    assert not rig["upstream"].seen


def test_a_refused_session_is_forgotten_and_reaches_nothing(rig):
    rig["portal"].state["valid"] = set()  # the owner withdrew the share
    try:
        status, headers, body = through(rig, headers=[("Cookie", "__Host-gpu-portal-ws=sess-7")])
    finally:
        rig["portal"].state["valid"] = {"sess-7", "sess-code"}
    assert status == 403 and b"only its owner and the teammates" in body
    assert header(headers, "Set-Cookie")[0].startswith("__Host-gpu-portal-ws=; Path=/; Max-Age=0")
    assert not rig["upstream"].seen


def test_bodies_pass_whole_sized_or_chunked(rig):
    cookie = ("Cookie", "__Host-gpu-portal-ws=sess-7")
    status, _, body = through(rig, "POST", headers=[cookie], body=b"a" * 100_000)
    assert status == 200 and body == b"got " + b"a" * 100_000
    chunked = request("POST", HOST, PATH, [cookie, ("Transfer-Encoding", "chunked")])
    chunked += b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    rig["upstream"].seen.clear()
    status, _, body = exchange(rig["port"], chunked)
    assert status == 200 and body == b"got hello world"


def _handshake(origin: str) -> bytes:
    return request(
        "GET",
        HOST,
        f"{PATH}api/kernels/1/channels",
        [
            ("Cookie", f"{PORTAL_COOKIES}; __Host-gpu-portal-ws=sess-7"),
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Origin", origin),
        ],
    )


def test_a_kernels_websocket_passes_with_the_secret_and_without_portal_cookies(rig):
    rig["upstream"].seen.clear()
    with socket.create_connection(("127.0.0.1", rig["port"]), timeout=10) as sock:
        sock.sendall(_handshake(f"https://{HOST}"))
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += sock.recv(1)
        assert reply.startswith(b"HTTP/1.0 101") or reply.startswith(b"HTTP/1.1 101"), reply
        assert b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in reply  # RFC 6455's example accept
        sock.sendall(frame(b"execute_request", mask=True))
        stream = sock.makefile("rb")
        assert read_frame(stream.read) == b"echo: execute_request"
    (seen,) = rig["upstream"].seen
    assert ("Authorization", f"token {SECRET}") in seen["headers"]
    assert "PORTAL" not in seen["cookie"] and "sess-7" not in seen["cookie"]


def test_another_sites_websocket_or_post_is_refused_before_the_portal_is_asked(rig):
    """A teammate's workspace (a sibling host) cannot drive this one with the owner's cookie."""
    asked = len(rig["portal"].seen)
    status, _, _ = exchange(rig["port"], _handshake("https://w8.ws.example-workspaces.test"))
    assert status == 403
    evil = [("Cookie", "__Host-gpu-portal-ws=sess-7"), ("Origin", "https://w8.evil.test")]
    assert through(rig, "POST", headers=evil, body=b"x")[0] == 403
    assert len(rig["portal"].seen) == asked and not rig["upstream"].seen


def test_other_hosts_bad_heads_and_health(rig):
    assert through(rig, host="portal.example.test")[0] == 404
    assert through(rig, host="w7.ws.example-workspaces.test.evil.test")[0] == 404
    status, _, body = exchange(rig["port"], b"NONSENSE\r\n\r\n")
    assert status == 400 and b"METHOD TARGET" in body
    assert through(rig, path="/_portal/healthz", host="anything")[0] == 200


def test_the_proxy_says_which_settings_it_misses():
    with pytest.raises(ConfigError, match="WORKSPACE_DOMAIN, WORKSPACE_PROXY_TOKEN"):
        from_env({"PORTAL_BASE_URL": "https://p"})
    with pytest.raises(ConfigError, match="numbers"):
        from_env(
            {
                "PORTAL_BASE_URL": "https://p",
                "WORKSPACE_DOMAIN": "ws.x",
                "WORKSPACE_PROXY_TOKEN": "t",
                "WORKSPACE_PROXY_PORT": "eighty",
            }
        )


def test_code_server_gets_its_session_cookie_and_its_own_paths(rig):
    forged = "code-server-session=guessed; __Host-gpu-portal-ws=sess-code; sessionid=PORTAL"
    status, _, body = through(
        rig, path="/ws/tenant-team-a/cs/static/x.js?v=1", headers=[("Cookie", forged)]
    )
    assert status == 200 and body == b"hello from the server"
    (seen,) = rig["upstream"].seen
    assert seen["path"] == "/static/x.js?v=1"
    assert seen["cookie"] == f"code-server-session={SECRET}"  # the browser's own one replaced


def test_code_servers_path_is_cut_off_on_the_way_in():
    prefix = "/ws/tenant-team-a/cs"
    assert wire.cut_prefix(f"{prefix}/static/x.js?v=1", prefix) == "/static/x.js?v=1"
    assert wire.cut_prefix(prefix, prefix) == "/"
    assert wire.cut_prefix(f"{prefix}?folder=/home", prefix) == "/?folder=/home"
    assert wire.cut_prefix(f"{prefix}x/y", prefix) == f"{prefix}x/y"  # another workspace's
    assert wire.cut_prefix("/healthz", "") == "/healthz"


def test_next_paths_stay_on_the_workspace_host():
    assert wire.safe_next("/ws/a/b/lab?x=1") == "/ws/a/b/lab?x=1"
    for bad in (None, "", "//evil.test/", "https://evil.test/", "/\\evil.test", "/a\r\nX: y"):
        assert wire.safe_next(bad) == "/"


def test_a_body_of_two_lengths_is_refused_or_passed_by_its_chunks_alone(rig):
    """Request smuggling: a Content-Length beside chunks never reaches the server."""
    cookie = ("Cookie", "__Host-gpu-portal-ws=sess-7")
    both = request("POST", HOST, PATH, [cookie, ("Transfer-Encoding", "chunked")])
    both = both.replace(b"\r\n\r\n", b"\r\nContent-Length: 3\r\n\r\n", 1)
    rig["upstream"].seen.clear()
    status, _, body = exchange(rig["port"], both + b"5\r\nhello\r\n0\r\n\r\n")
    assert status == 200 and body == b"got hello"
    (seen,) = rig["upstream"].seen
    assert not [v for k, v in seen["headers"] if k.lower() == "content-length"]
    for bad in (("Transfer-Encoding", "gzip, chunked"), ("Content-Length", "3, 4")):
        status, _, said = through(rig, "POST", headers=[cookie, bad])
        assert status == 400 and bad[0].encode() in said
    assert not rig["upstream"].seen
