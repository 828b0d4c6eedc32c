"""A small HTTP client for the portal's API (standard library only)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, body: dict):
        self.status = status
        self.body = body
        code = body.get("code", "error")
        detail = body.get("detail", "")
        errors = body.get("errors") or {}
        extra = "".join(f"\n  {field}: {'; '.join(msgs)}" for field, msgs in errors.items())
        super().__init__(f"{status} {code}: {detail}{extra}")


@dataclass
class Client:
    base_url: str
    token: str
    retries: int = 3
    timeout: float = 30.0

    def request(
        self, method: str, path: str, body: Any = None, *, idempotency_key: str | None = None
    ) -> Any:
        url = urllib.parse.urljoin(self.base_url.rstrip("/") + "/", path.lstrip("/"))
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if method == "POST":
            # The same key on every retry: a POST the server already did is answered, not redone.
            headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                    raw = resp.read()
                    return json.loads(raw) if raw else None
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                try:
                    payload = json.loads(raw) if raw else {}
                except ValueError:
                    payload = {"code": "error", "detail": raw.decode(errors="replace")[:300]}
                if (exc.code >= 500 or exc.code == 429) and attempt < self.retries:
                    time.sleep(min(2**attempt, 10))
                    continue
                raise ApiError(exc.code, payload) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                if attempt < self.retries:
                    time.sleep(min(2**attempt, 10))
                    continue
                raise ApiError(0, {"code": "unreachable", "detail": str(exc)}) from None
        raise AssertionError("unreachable")

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any = None, *, idempotency_key: str | None = None) -> Any:
        return self.request("POST", path, body or {}, idempotency_key=idempotency_key)
