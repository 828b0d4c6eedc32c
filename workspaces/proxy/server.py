"""The proxy's connection handler: one request per connection, checked with the portal, then
passed to the workspace's server with its secret, its portal cookies stripped (HTTP), or joined
to it both ways (WebSocket)."""

from __future__ import annotations

import asyncio
import html
import logging
from urllib.parse import parse_qs, urlsplit

from workspaces.proxy import wire
from workspaces.proxy.config import COOKIE, Config
from workspaces.proxy.portal_client import Portal
from workspaces.sites import workspace_id_of

log = logging.getLogger("workspaces.proxy")
ENTER_PATH = "/_portal/enter"
HEALTH_PATH = "/_portal/healthz"
REASONS = {
    200: "OK",
    303: "See Other",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class Proxy:
    def __init__(self, config: Config, portal: Portal | None = None):
        self.config = config
        self.portal = portal or Portal(config)

    # --- answers of the proxy's own -------------------------------------------------------------

    async def _say(
        self,
        writer,
        status: int,
        text: str,
        *,
        headers: list[tuple[str, str]] | None = None,
        link: str | None = None,
    ) -> int:
        page = f"<!doctype html><title>{status}</title><p>{html.escape(text)}</p>"
        if link:
            page += f'<p><a href="{html.escape(link)}">Open it from the portal</a></p>'
        body = page.encode()
        every = [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("Connection", "close"),
            *(headers or []),
        ]
        writer.write(wire.render_head(f"HTTP/1.1 {status} {REASONS[status]}", every) + body)
        await writer.drain()
        return status

    def _open_link(self, workspace_id: int) -> str:
        return f"{self.config.public_url}/workspaces/{workspace_id}/open/"

    def _cookie(self, value: str, max_age: int) -> tuple[str, str]:
        return (
            "Set-Cookie",
            f"{COOKIE}={value}; Path=/; Max-Age={max_age}; Secure; HttpOnly; SameSite=Lax",
        )

    # --- the way in -------------------------------------------------------------------------

    async def _enter(self, writer, head: wire.Head, workspace_id: int) -> int:
        query = parse_qs(urlsplit(head.first[1]).query)
        ticket = (query.get("ticket") or [""])[0]
        answer = await self.portal.enter(workspace_id, ticket)
        if answer.status == 200 and isinstance(answer.body.get("session"), str):
            max_age = int(answer.body.get("max_age") or 3600)
            target = wire.safe_next((query.get("next") or ["/"])[0])
            headers = [
                self._cookie(answer.body["session"], max_age),
                ("Location", target),
                ("Referrer-Policy", "no-referrer"),
            ]
            return await self._say(writer, 303, "Opening the workspace.", headers=headers)
        if answer.status == 0:
            return await self._say(writer, 502, "The portal does not answer; try again.")
        return await self._say(
            writer,
            403,
            "This link was used already, is too old, or is not yours: open the workspace from "
            "the portal again.",
            link=self._open_link(workspace_id),
        )

    async def _checked(self, writer, head: wire.Head, workspace_id: int):
        """The portal's answer for the request's workspace cookie, or the status said."""
        session = next((v for k, v in wire.cookies(head.all("Cookie")) if k == COOKIE), None)
        navigating = head.first[0] in ("GET", "HEAD") and not wire.is_websocket(head)
        if not session:
            if navigating:  # the portal checks the person and sends them back with a ticket
                where = [("Location", self._open_link(workspace_id))]
                return await self._say(writer, 303, "Sign in through the portal.", headers=where)
            return await self._say(writer, 401, "Open the workspace from the portal first.")
        answer = await self.portal.check(workspace_id, session)
        if answer.status == 200:
            return answer
        if answer.status == 0:
            return await self._say(writer, 502, "The portal does not answer; try again.")
        if answer.status == 403:
            forget = [("Set-Cookie", f"{COOKIE}=; Path=/; Max-Age=0; Secure; HttpOnly")]
            return await self._say(
                writer,
                403,
                "You may not open this workspace (any more): only its owner and the teammates "
                "they share it with may.",
                headers=forget,
                link=self._open_link(workspace_id),
            )
        detail = str(answer.body.get("detail") or "the portal refused")
        return await self._say(writer, 503, detail, link=self._open_link(workspace_id))

    # --- passing it on ----------------------------------------------------------------------

    def _upstream_head(self, head: wire.Head, answer, peer: str, websocket: bool) -> bytes:
        given = answer.body
        strip = {COOKIE, *self.config.strip_cookies, *given.get("cookies", {})}
        kept = [(k, v) for k, v in wire.cookies(head.all("Cookie")) if k not in strip]
        kept += list(given.get("cookies", {}).items())
        inject = dict(given.get("headers", {}))
        # a chunked body's length is its chunks': a Content-Length beside it never travels on
        sized_by_chunks = wire.is_chunked(head)
        headers = head.without(
            *(["content-length"] if sized_by_chunks else []),
            *wire.HOP_BY_HOP,
            "cookie",
            "authorization",
            "x-forwarded-for",
            "x-forwarded-proto",
            "x-forwarded-host",
            "forwarded",
            *inject,
        )
        if kept:
            headers.append(("Cookie", wire.cookie_header(kept)))
        headers += list(inject.items())
        forwarded_for = ", ".join([*head.all("X-Forwarded-For"), peer])
        headers += [("X-Forwarded-For", forwarded_for), ("X-Forwarded-Proto", "https")]
        if websocket:
            headers += [("Connection", "Upgrade"), ("Upgrade", "websocket")]
        else:
            headers.append(("Connection", "close"))
        method, target, _ = head.first
        target = wire.cut_prefix(target, str(given.get("strip_prefix") or ""))
        return wire.render_head(f"{method} {target} HTTP/1.1", headers)

    async def _response_head(self, upstream_reader, websocket: bool) -> bytes:
        """The server's answer's head, without a cookie that would replace the proxy's."""
        head = wire.parse_head((await wire.read_head(upstream_reader))[:-4])
        version, status, reason = head.first
        headers = [
            (k, v)
            for k, v in head.headers
            if not (k.lower() == "set-cookie" and v.lstrip().startswith(COOKIE + "="))
        ]
        if not (websocket and status == "101"):
            headers = [(k, v) for k, v in headers if k.lower() not in ("connection", "keep-alive")]
            headers.append(("Connection", "close"))
        return wire.render_head(f"{version} {status} {reason}", headers)

    async def _pass(self, reader, writer, head: wire.Head, answer, peer: str) -> int:
        host, _, port = str(answer.body.get("upstream", "")).rpartition(":")
        websocket = wire.is_websocket(head)
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(host, int(port)), self.config.upstream_timeout_s
            )
        except (OSError, ValueError, TimeoutError):
            return await self._say(
                writer, 502, "The workspace's server does not answer: is it running?"
            )
        try:
            up_writer.write(self._upstream_head(head, answer, peer, websocket))
            if wire.is_chunked(head):
                await wire.copy_chunked(reader, up_writer)
            elif (length := wire.content_length(head)) is not None:
                await wire.copy_exact(reader, up_writer, length)
            await up_writer.drain()
            try:
                answered = await self._response_head(up_reader, websocket)
            except (asyncio.IncompleteReadError, wire.BadRequest, ConnectionError):
                return await self._say(writer, 502, "The workspace's server gave no answer.")
            writer.write(answered)
            await writer.drain()
            if websocket:
                await asyncio.gather(wire.pipe(reader, up_writer), wire.pipe(up_reader, writer))
            else:
                await wire.pipe(up_reader, writer)
        finally:
            up_writer.close()
        return 101 if websocket else 200

    # --- one connection ---------------------------------------------------------------------

    async def handle(self, reader, writer) -> None:
        peer = (writer.get_extra_info("peername") or ("?",))[0]
        status, path, user = 0, "?", "-"
        try:
            head = wire.parse_head((await wire.read_head(reader))[:-4])
            method, target, _ = head.first
            path = urlsplit(target).path
            if path == HEALTH_PATH:
                status = await self._say(writer, 200, "ok")
                return
            workspace_id = workspace_id_of(head.get("Host") or "", self.config.domain)
            if workspace_id is None:
                status = await self._say(writer, 404, "No workspace lives at this address.")
                return
            if path == ENTER_PATH and method == "GET":
                status = await self._enter(writer, head, workspace_id)
                return
            if (method not in ("GET", "HEAD") or wire.is_websocket(head)) and not (
                wire.same_origin(head)
            ):
                status = await self._say(writer, 403, "A request from another site is refused.")
                return
            answer = await self._checked(writer, head, workspace_id)
            if isinstance(answer, int):
                status = answer
                return
            user = str(answer.body.get("user", "-"))
            status = await self._pass(reader, writer, head, answer, peer)
        except (wire.BadRequest, ValueError) as exc:
            status = await self._say(writer, 400, f"A request the proxy cannot read: {exc}")
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            status = status or 499
        finally:
            # never the query: a ticket travels there
            log.info("%s %s %s %s", peer, path, status, user)
            try:
                writer.close()
            except (ConnectionError, RuntimeError):
                pass


async def serve(config: Config, ready=None) -> None:
    proxy = Proxy(config)
    server = await asyncio.start_server(proxy.handle, config.host, config.port, limit=wire.MAX_HEAD)
    bound = server.sockets[0].getsockname()
    print(f"workspace proxy listening on {bound[0]}:{bound[1]}", flush=True)  # noqa: T201
    if ready is not None:
        ready(bound)
    async with server:
        await server.serve_forever()
