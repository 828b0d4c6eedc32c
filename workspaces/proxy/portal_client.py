"""The proxy's two questions to the portal (workspaces/proxy_views.py), and a short memory of
the answers about sessions, so that a page's many requests cost the portal one question."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from workspaces.proxy.config import Config

MAX_REMEMBERED = 10_000


@dataclass(frozen=True)
class Answer:
    status: int  # the portal's: 200, 403 (refused), 409 (no secret yet), 0 (no answer)
    body: dict


class Portal:
    def __init__(self, config: Config):
        self.config = config
        self._checked: dict[tuple[int, str], tuple[float, Answer]] = {}

    def _post(self, path: str, body: dict) -> Answer:
        request = urllib.request.Request(  # noqa: S310 - the configured portal's URL
            self.config.portal_url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "X-Proxy-Token": self.config.token},
        )
        try:
            with urllib.request.urlopen(  # noqa: S310
                request, timeout=self.config.portal_timeout_s
            ) as response:
                return Answer(response.status, json.loads(response.read(65536) or b"{}"))
        except urllib.error.HTTPError as exc:
            try:
                said = json.loads(exc.read(65536) or b"{}")
            except ValueError:
                said = {}
            return Answer(exc.code, said if isinstance(said, dict) else {})
        except (OSError, ValueError):
            return Answer(0, {"detail": "the portal did not answer"})

    async def enter(self, workspace_id: int, ticket: str) -> Answer:
        body = {"workspace": workspace_id, "ticket": ticket}
        return await asyncio.to_thread(self._post, "/workspaces/proxy/enter/", body)

    async def check(self, workspace_id: int, session: str) -> Answer:
        key, now = (workspace_id, session), time.monotonic()
        kept = self._checked.get(key)
        if kept is not None and kept[0] > now:
            return kept[1]
        body = {"workspace": workspace_id, "session": session}
        answer = await asyncio.to_thread(self._post, "/workspaces/proxy/check/", body)
        if answer.status in (200, 403):  # remembered; errors are asked again
            if len(self._checked) >= MAX_REMEMBERED:
                self._checked.clear()
            self._checked[key] = (now + self.config.recheck_s, answer)
        return answer
