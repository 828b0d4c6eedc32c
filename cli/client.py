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
        extra = "".join(
            f"\n  {field}: {'; '.join(map(str, msgs)) if isinstance(msgs, list) else msgs}"
            for field, msgs in (errors.items() if isinstance(errors, dict) else [])
        )
        super().__init__(f"{status} {code}: {detail}{extra}")


def with_query(path: str, params: dict[str, Any]) -> str:
    """`path` with the parameters that have a value, URL-encoded."""
    given = {k: v for k, v in params.items() if v is not None and v != ""}
    if not given:
        return path
    return f"{path}{'&' if '?' in path else '?'}{urllib.parse.urlencode(given, doseq=True)}"


@dataclass
class Client:
    base_url: str
    token: str
    retries: int = 3
    timeout: float = 30.0

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        idempotency_key: str | None = None,
        raw: bool = False,
    ) -> Any:
        """The answer's JSON (None for an empty body), or its text with `raw` (a CSV export).
        A 4xx raises ApiError with the API's `code`, `detail` and field messages."""
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
                    content = resp.read()
                    if raw:
                        return content.decode()
                    return json.loads(content) if content else None
            except urllib.error.HTTPError as exc:
                content = exc.read()
                try:
                    payload = json.loads(content) if content else {}
                except ValueError:
                    payload = {"code": "error", "detail": content.decode(errors="replace")[:300]}
                if not isinstance(payload, dict):
                    payload = {"code": "error", "detail": str(payload)[:300]}
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

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", with_query(path, params))

    def get_text(self, path: str, **params: Any) -> str:
        return self.request("GET", with_query(path, params), raw=True)

    def get_all(self, path: str, **params: Any) -> list:
        """Every row of a paginated list: page after page (by number, on this client's base
        URL, whatever host a proxy put in `next`) while there is a next one."""
        rows: list = []
        number = 1
        while True:
            page = self.get(path, page=number, page_size=200, **params)
            rows.extend(page["results"])
            if not page.get("next"):
                return rows
            number += 1

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def post(self, path: str, body: Any = None, *, idempotency_key: str | None = None) -> Any:
        return self.request("POST", path, body or {}, idempotency_key=idempotency_key)
